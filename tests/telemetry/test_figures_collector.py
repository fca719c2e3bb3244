"""The acceptance gauges: the periodic job's snapshot, exported by AcceptanceCollector with one
read whatever the history's size; no data and a stale snapshot are NaN."""

import math
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from prometheus_client import CollectorRegistry, generate_latest

from telemetry.figures.selectors import AcceptanceCollector
from telemetry.figures.models import AcceptanceSnapshot
from telemetry.figures.services import refresh_acceptance_snapshot, refresh_figures_job
from tests.telemetry import history

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("figure_slas")]


@pytest.fixture(autouse=True)
def _window(settings):
    settings.RETRYOPS_FIGURES_WINDOW_SECONDS = history.HOUR


def samples() -> dict[tuple[str, str], float]:
    return {(s.name, s.labels.get("percentile", "")): s.value
            for family in AcceptanceCollector().collect() for s in family.samples}


def test_the_gauges_export_the_snapshot_the_job_computed():
    now = timezone.now()
    history.retry_events(now)
    history.escalations(now)
    refresh_acceptance_snapshot(now=now)
    got = samples()
    assert got[("retryops_retry_success_ratio", "")] == pytest.approx(0.6)
    assert got[("retryops_dead_letter_to_work_order_seconds", "p50")] == pytest.approx(240)
    assert got[("retryops_dead_letter_to_work_order_seconds", "p99")] == pytest.approx(1768.8)


def test_a_figure_without_data_is_nan():
    refresh_acceptance_snapshot()
    got = samples()
    assert len(got) == 7 and all(math.isnan(value) for value in got.values())


def test_a_stale_snapshot_is_not_exported_as_if_current():
    history.retry_events(timezone.now())
    refresh_acceptance_snapshot()
    AcceptanceSnapshot.objects.update(computed_at=timezone.now() - timedelta(seconds=301))
    assert math.isnan(samples()[("retryops_retry_success_ratio", "")])


def test_a_scrape_reads_one_row():
    refresh_acceptance_snapshot()
    with CaptureQueriesContext(connection) as queries:
        samples()
    assert len(queries.captured_queries) == 1


def test_the_job_replaces_the_windows_snapshot():
    refresh_figures_job()
    history.retry_events(timezone.now())
    assert refresh_figures_job()["retry_success_ratio"] == pytest.approx(0.6)
    assert AcceptanceSnapshot.objects.count() == 1


def test_the_gauges_are_valid_prometheus_text():
    refresh_acceptance_snapshot()
    registry = CollectorRegistry()
    registry.register(AcceptanceCollector())
    text = generate_latest(registry).decode()
    assert 'retryops_work_order_to_compensated_seconds{percentile="p99"} NaN' in text
    assert "# TYPE retryops_compensation_completion_ratio gauge" in text
