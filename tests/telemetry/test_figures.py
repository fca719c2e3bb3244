"""The acceptance figures on hand-built histories give the hand-calculated numbers (the
calculations are in tests/telemetry/history.py), and an empty window gives no data."""

import pytest
from django.utils import timezone

from telemetry.figures.selectors import acceptance_figures
from tests.telemetry import history

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("figure_slas")]


@pytest.fixture
def now():
    return timezone.now()


def figures(now):
    return acceptance_figures(seconds=history.HOUR, now=now)


def test_retry_success_rate_is_the_share_of_retries_ended_in_the_window_that_succeeded(now):
    history.retry_events(now)
    figure = figures(now)["retry_success_ratio"]
    assert figure.value == pytest.approx(0.6)
    assert figure.counts == {"succeeded": 3, "ended": 5}
    assert figure.met is False


def test_retries_within_sla_count_late_starts_and_retries_still_waiting_past_their_grace(now):
    history.retry_starts(now)
    figure = figures(now)["retry_within_sla_ratio"]
    assert figure.value == pytest.approx(0.5)
    assert figure.counts == {"on_time": 2, "late": 1, "waiting": 1, "due": 4}


def test_the_sla_grace_setting_decides_which_retries_started_late(now, settings):
    history.retry_starts(now)
    settings.RETRYOPS_RETRY_SLA_GRACE_SECONDS = 31
    assert figures(now)["retry_within_sla_ratio"].counts == {"on_time": 3, "late": 0, "waiting": 1, "due": 4}


def test_dead_letter_to_work_order_runs_to_the_first_page_sent_and_counts_the_unpaged_as_waiting(now):
    history.escalations(now)
    f = figures(now)
    assert f["dead_letter_to_work_order_p50"].value == pytest.approx(240)
    assert f["dead_letter_to_work_order_p99"].value == pytest.approx(1768.8)
    assert f["dead_letter_to_work_order_p50"].counts == {"work_orders": 3, "paged": 2, "not_paged": 1}
    assert f["dead_letter_to_work_order_p50"].met is True and f["dead_letter_to_work_order_p99"].met is False


def test_work_order_to_compensated_measures_the_work_orders_compensated_in_the_window(now):
    history.compensations(now)
    f = figures(now)
    assert f["work_order_to_compensated_p50"].value == pytest.approx(2700)
    assert f["work_order_to_compensated_p99"].value == pytest.approx(4170)
    assert f["work_order_to_compensated_p99"].counts == {"work_orders": 2}
    assert f["work_order_to_compensated_p99"].met is False  # the hour's compensate SLA


def test_completion_rate_is_the_share_of_work_orders_due_in_the_window_completed_by_their_sla(now):
    history.completions(now)
    figure = figures(now)["compensation_completion_ratio"]
    assert figure.value == pytest.approx(0.5)
    assert figure.counts == {"completed": 2, "due": 4, "not_completed": 2}


def test_an_empty_window_gives_no_data_not_zero(now):
    # Every row hours before the window.
    for build in (history.retry_events, history.retry_starts, history.escalations, history.compensations):
        build(now - history.minutes(300))
    f = figures(now)
    assert {key: figure.value for key, figure in f.items()} == dict.fromkeys(f, None)
    assert {figure.met for figure in f.values()} == {None}
