"""Evaluating the alerts: each fires once, resolves after its value stayed down, does not flap in
the band between its levels, notifies both ways with its dedup key, and two evaluators at once
fire it once."""

import math
import threading
from datetime import timedelta

import pytest
from django.db import connections, transaction
from django.utils import timezone

from compensation.notifications.models import Notification
from retryops.errors import BadInput
from telemetry.alerts import services as alerts
from telemetry.alerts.services import (
    BUSY,
    CLEARING,
    FAILED,
    FIRED,
    FIRING,
    OK,
    RESOLVED,
    evaluate_alert,
    evaluate_alerts,
)
from telemetry.alerts.collector import AlertCollector
from telemetry.alerts.jobs import evaluate_alerts_job
from telemetry.alerts.models import Alert, AlertEvent
from telemetry.alerts.rules import RULES, Reading
from tests.telemetry.conftest import open_dead_letters, retries, settle_dead_letters

pytestmark = pytest.mark.django_db


def history(rule: str) -> list[str]:
    return list(AlertEvent.objects.filter(alert__rule=rule).order_by("id").values_list("kind", flat=True))


def pages(rule: str) -> list[tuple[str, str]]:
    """(event, channel) of the notifications about an alert, oldest first."""
    return list(Notification.objects.filter(dedup_key=f"retryops/alert/{rule}").order_by("id")
                .values_list("event", "channel"))


def test_an_alert_above_its_threshold_fires_once_over_two_evaluations(levels, no_channels):
    open_dead_letters(11)
    now = timezone.now()

    assert evaluate_alert(rule="dlq_length", now=now) == FIRED
    assert evaluate_alert(rule="dlq_length", now=now + timedelta(seconds=30)) == FIRING

    assert history("dlq_length") == ["fired"]
    assert pages("dlq_length") == [("trigger", "pagerduty"), ("trigger", "slack")]
    alert = Alert.objects.get(rule="dlq_length")
    assert (alert.state, alert.since, alert.value, alert.threshold, alert.clear_level) == ("firing", now, 11, 10, 8)


def test_an_alert_at_its_threshold_does_not_fire(levels, no_channels):
    open_dead_letters(10)

    assert evaluate_alert(rule="dlq_length") == OK
    assert history("dlq_length") == [] and pages("dlq_length") == []


def test_a_firing_alert_resolves_once_its_value_stayed_at_the_clear_level(levels, no_channels):
    open_dead_letters(11)
    now = timezone.now()
    evaluate_alert(rule="dlq_length", now=now)
    settle_dead_letters(8)

    assert evaluate_alert(rule="dlq_length", now=now + timedelta(seconds=30)) == CLEARING
    assert evaluate_alert(rule="dlq_length", now=now + timedelta(seconds=89)) == CLEARING
    assert evaluate_alert(rule="dlq_length", now=now + timedelta(seconds=90)) == RESOLVED
    assert evaluate_alert(rule="dlq_length", now=now + timedelta(seconds=120)) == OK

    assert history("dlq_length") == ["fired", "resolved"]
    assert pages("dlq_length") == [("trigger", "pagerduty"), ("trigger", "slack"),
                                   ("resolve", "pagerduty"), ("resolve", "slack")]
    alert = Alert.objects.get(rule="dlq_length")
    assert (alert.state, alert.since, alert.clear_since) == ("ok", now + timedelta(seconds=90), None)


def test_a_value_inside_the_band_neither_resolves_nor_fires_again(levels, no_channels):
    open_dead_letters(11)
    now = timezone.now()
    evaluate_alert(rule="dlq_length", now=now)
    settle_dead_letters(9)  # below the threshold (10), above the clear level (8)

    outcomes = [evaluate_alert(rule="dlq_length", now=now + timedelta(minutes=minutes)) for minutes in (1, 5, 60)]
    open_dead_letters(3)  # 12: above the threshold again
    outcomes.append(evaluate_alert(rule="dlq_length", now=now + timedelta(minutes=61)))

    assert outcomes == [FIRING, FIRING, FIRING, FIRING]
    assert history("dlq_length") == ["fired"]


def test_an_ok_alert_inside_the_band_stays_ok(levels, no_channels):
    open_dead_letters(9)

    assert evaluate_alert(rule="dlq_length") == OK


def test_a_value_back_above_the_clear_level_restarts_the_wait_to_resolve(levels, no_channels):
    open_dead_letters(11)
    now = timezone.now()
    evaluate_alert(rule="dlq_length", now=now)
    settle_dead_letters(8)
    evaluate_alert(rule="dlq_length", now=now + timedelta(seconds=10))
    open_dead_letters(1)  # 9, in the band
    assert evaluate_alert(rule="dlq_length", now=now + timedelta(seconds=40)) == FIRING
    settle_dead_letters(8)

    assert evaluate_alert(rule="dlq_length", now=now + timedelta(seconds=80)) == CLEARING
    assert evaluate_alert(rule="dlq_length", now=now + timedelta(seconds=139)) == CLEARING
    assert evaluate_alert(rule="dlq_length", now=now + timedelta(seconds=140)) == RESOLVED


def test_an_alert_fires_again_after_it_resolved(levels, no_channels):
    open_dead_letters(11)
    now = timezone.now()
    evaluate_alert(rule="dlq_length", now=now)
    settle_dead_letters(0)
    evaluate_alert(rule="dlq_length", now=now + timedelta(seconds=1))
    evaluate_alert(rule="dlq_length", now=now + timedelta(seconds=61))
    open_dead_letters(11)

    assert evaluate_alert(rule="dlq_length", now=now + timedelta(seconds=90)) == FIRED
    assert history("dlq_length") == ["fired", "resolved", "fired"]


def test_a_failure_rate_with_too_few_retries_to_judge_resolves_a_firing_alert(levels, no_channels):
    retries(succeeded=10, failed=10)
    now = timezone.now()
    assert evaluate_alert(rule="retry_failure_rate", now=now) == FIRED

    # Ten minutes later the window holds no retry at all.
    later = now + timedelta(minutes=11)
    assert evaluate_alert(rule="retry_failure_rate", now=later) == CLEARING
    assert evaluate_alert(rule="retry_failure_rate", now=later + timedelta(seconds=60)) == RESOLVED


def test_a_failure_rate_of_16_percent_fires_and_12_percent_resolves(levels, no_channels):
    retries(succeeded=21, failed=4)  # 16%
    now = timezone.now()
    assert evaluate_alert(rule="retry_failure_rate", now=now) == FIRED
    retries(succeeded=8)  # 4 of 33: 12.1%, inside the band
    assert evaluate_alert(rule="retry_failure_rate", now=now + timedelta(seconds=30)) == FIRING
    retries(succeeded=1)  # 4 of 34: 11.8%
    assert evaluate_alert(rule="retry_failure_rate", now=now + timedelta(seconds=60)) == CLEARING
    assert evaluate_alert(rule="retry_failure_rate", now=now + timedelta(seconds=120)) == RESOLVED


def test_with_no_wait_to_clear_the_first_clear_evaluation_resolves(levels, no_channels):
    levels.RETRYOPS_ALERT_CLEAR_SECONDS = 0
    open_dead_letters(11)
    evaluate_alert(rule="dlq_length")
    settle_dead_letters(8)

    assert evaluate_alert(rule="dlq_length") == RESOLVED


def test_evaluate_alerts_evaluates_every_rule_and_makes_their_rows(levels, no_channels):
    result = evaluate_alerts()

    assert list(result.outcomes) == list(RULES) and result.failures == []
    assert sorted(Alert.objects.values_list("rule", flat=True)) == sorted(RULES)


def test_a_rule_that_raises_is_reported_and_the_others_still_run(levels, no_channels, monkeypatch):
    open_dead_letters(11)

    def broken(*, now):
        raise RuntimeError("database on fire")

    monkeypatch.setattr(RULES["retry_failure_rate"], "read", broken)

    result = evaluate_alerts()

    assert result.outcomes["retry_failure_rate"] == FAILED and result.outcomes["dlq_length"] == FIRED
    assert result.failures == ["retry_failure_rate: RuntimeError: database on fire"]


@pytest.mark.parametrize("value", [math.nan, math.inf, -1, 1e16])
def test_a_rule_reading_a_value_no_alert_can_hold_is_refused_and_writes_nothing(levels, no_channels, monkeypatch,
                                                                                 value):
    monkeypatch.setattr(RULES["dlq_length"], "read", lambda *, now: Reading(value, {"open": 1}))
    alerts.ensure_alerts()

    with pytest.raises(BadInput, match="rule dlq_length read"):
        evaluate_alert(rule="dlq_length")

    assert history("dlq_length") == [] and Alert.objects.get(rule="dlq_length").evaluated_at is None


def test_facts_and_a_detail_a_column_cannot_hold_are_cleaned_and_cut(levels, no_channels, heartbeats):
    heartbeats.silent = [f"worker {i:02}\x00" + "x" * 300 for i in range(30)]

    evaluate_alert(rule="component_silent")

    alert = Alert.objects.get(rule="component_silent")
    assert "\x00" not in alert.detail and len(alert.detail) == 2000 and alert.detail.endswith("…")
    assert alert.facts["count"] == 30 and len(alert.facts["silent"]) == 20
    assert "\x00" not in alert.facts["silent"][0]


@pytest.mark.parametrize("kwargs, field", [({"rule": "dlq"}, "rule"), ({"rule": ["dlq_length"]}, "rule"),
                                           ({"rule": "dlq_length", "now": "now"}, "now")])
def test_bad_input_names_the_field(db, kwargs, field):
    with pytest.raises(BadInput) as caught:
        evaluate_alert(**kwargs)

    assert caught.value.details["field"] == field


def test_the_periodic_job_evaluates_every_rule(levels, no_channels):
    open_dead_letters(11)

    result = evaluate_alerts_job()

    assert result["outcomes"]["dlq_length"] == FIRED and result["failures"] == []


def test_the_collector_says_which_alerts_fire_and_which_do_not(levels, no_channels):
    open_dead_letters(11)
    evaluate_alert(rule="dlq_length")  # the others have no row yet

    family, age = AlertCollector().collect()

    assert family.name == "retryops_alert_firing"
    assert {sample.labels["alert"]: sample.value for sample in family.samples} == {
        "retry_failure_rate": 0, "dlq_length": 1, "work_order_creation_failed": 0, "notification_failed": 0,
        "component_silent": 0, "metrics_watermark_stuck": 0, "retries_overdue": 0, "metrics_rollup_stale": 0,
        "figures_below_target": 0, "work_order_sla_breached": 0}
    assert age.name == "retryops_alert_evaluation_age_seconds" and 0 <= age.samples[0].value < 60


def test_the_collector_says_nothing_of_the_evaluations_age_before_the_first_one(db):
    _firing, age = AlertCollector().collect()

    assert age.samples == []


def test_the_evaluations_age_is_the_age_of_the_rule_evaluated_longest_ago(levels, no_channels, monkeypatch):
    # A rule that raises at every run keeps its last state (firing or not) while the others run:
    # Prometheus must see it as not evaluated, or its alert is frozen without anyone told.
    evaluate_alerts(now=timezone.now() - timedelta(minutes=10))

    def broken(*, now):
        raise RuntimeError("database on fire")

    monkeypatch.setattr(RULES["dlq_length"], "read", broken)
    evaluate_alerts()

    _firing, age = AlertCollector().collect()

    assert age.samples[0].value >= 600


def test_a_rule_that_never_evaluated_ages_from_when_its_row_was_made(levels, no_channels, monkeypatch):
    monkeypatch.setattr(RULES["dlq_length"], "read", lambda *, now: 1 / 0)
    evaluate_alerts()
    Alert.objects.filter(rule="dlq_length").update(since=timezone.now() - timedelta(minutes=10))

    _firing, age = AlertCollector().collect()

    assert age.samples[0].value >= 600


def test_the_row_of_a_rule_no_longer_shipped_does_not_age_the_evaluation(levels, no_channels):
    evaluate_alerts()
    Alert.objects.create(rule="retired_rule", threshold=1, clear_level=0,
                         evaluated_at=timezone.now() - timedelta(days=30))

    _firing, age = AlertCollector().collect()

    assert age.samples[0].value < 600


def test_metrics_export_the_firing_alerts(levels, no_channels):
    from telemetry.metrics.registry import exposition

    open_dead_letters(11)
    evaluate_alert(rule="dlq_length")

    text = exposition("text/plain")[0].decode()

    assert 'retryops_alert_firing{alert="dlq_length"} 1.0' in text
    assert 'retryops_alert_firing{alert="retry_failure_rate"} 0.0' in text


@pytest.mark.django_db(transaction=True)
def test_two_evaluators_at_once_fire_an_alert_once(levels, no_channels):
    open_dead_letters(11)
    alerts.ensure_alerts()
    start, outcomes = threading.Barrier(2), []

    def evaluator():
        try:
            start.wait(timeout=10)
            outcomes.append(evaluate_alert(rule="dlq_length"))
        finally:
            connections.close_all()

    threads = [threading.Thread(target=evaluator) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)

    assert sorted(outcomes) in ([BUSY, FIRED], [FIRED, FIRING])
    assert history("dlq_length") == ["fired"]
    assert pages("dlq_length") == [("trigger", "pagerduty"), ("trigger", "slack")]


@pytest.mark.django_db(transaction=True)
def test_an_evaluator_skips_an_alert_another_one_is_evaluating(levels, no_channels):
    open_dead_letters(11)
    alerts.ensure_alerts()
    locked, release = threading.Event(), threading.Event()

    def other_evaluator():
        try:
            with transaction.atomic():
                Alert.objects.select_for_update().get(rule="dlq_length")
                locked.set()
                release.wait(timeout=30)
        finally:
            connections.close_all()

    other = threading.Thread(target=other_evaluator)
    other.start()
    try:
        assert locked.wait(timeout=10)
        assert evaluate_alert(rule="dlq_length") == BUSY
    finally:
        release.set()
        other.join(timeout=30)

    assert history("dlq_length") == [] and Alert.objects.get(rule="dlq_length").state == "ok"
