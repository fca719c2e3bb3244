"""An alert's pages, through the compensation app's real notifiers to a local HTTP receiver: a
PagerDuty trigger and a Slack message when it fires, PagerDuty's resolve with the same dedup key
and a Slack "resolved" message when it resolves."""

from datetime import timedelta

import pytest
from django.utils import timezone

from compensation.notifications.services import send_due_notifications
from compensation.notifications.models import Notification
from telemetry.alerts.services import evaluate_alert
from telemetry.alerts.models import Alert
from tests.compensation.notify_fixtures import (
    PAGERDUTY_PATH,
    SLACK_PATH,
    accept,
    bodies,
    pagerduty_event_validator,
)
from tests.telemetry.conftest import open_dead_letters, settle_dead_letters

pytestmark = pytest.mark.django_db


def fire(now=None) -> Alert:
    open_dead_letters(11)
    evaluate_alert(rule="dlq_length", now=now)
    return Alert.objects.get(rule="dlq_length")


def resolve(now) -> None:
    settle_dead_letters(0)
    evaluate_alert(rule="dlq_length", now=now + timedelta(seconds=1))
    evaluate_alert(rule="dlq_length", now=now + timedelta(seconds=61))


def test_a_firing_alert_pages_pagerduty_with_its_dedup_key(levels, both_channels):
    accept(both_channels)
    alert = fire()

    assert send_due_notifications()["sent"] == 2

    [trigger] = bodies(both_channels, PAGERDUTY_PATH)
    pagerduty_event_validator().validate(trigger)
    assert (trigger["event_action"], trigger["dedup_key"]) == ("trigger", "retryops/alert/dlq_length")
    assert trigger["payload"]["summary"] == "Dead-letter queue length 11 is above 10: 11 open dead letters"
    assert trigger["payload"]["custom_details"]["rule"] == "dlq_length"
    assert trigger["links"][0]["href"].endswith(f"/admin/telemetry/alert/{alert.pk}/change/")


def test_a_firing_alert_posts_to_slack(levels, both_channels):
    accept(both_channels)
    fire()

    send_due_notifications()

    [slack] = bodies(both_channels, SLACK_PATH)
    assert slack["text"].startswith("Dead-letter queue length 11 is above 10")
    assert "Opened · dedup key `retryops/alert/dlq_length`" in str(slack["blocks"])


def test_the_notifications_name_the_alert_as_their_subject(levels, both_channels):
    accept(both_channels)
    alert = fire()

    assert set(Notification.objects.values_list("subject_type", "subject_id", "subject_label")) == {
        ("alert", alert.pk, "alert dlq_length")}


def test_a_resolved_alert_resolves_its_pagerduty_incident_and_tells_slack(levels, both_channels):
    accept(both_channels)
    now = timezone.now()
    fire(now)
    send_due_notifications()

    resolve(now)
    assert send_due_notifications()["sent"] == 2

    trigger, closing = bodies(both_channels, PAGERDUTY_PATH)
    pagerduty_event_validator().validate(closing)
    assert closing == {"routing_key": closing["routing_key"], "event_action": "resolve",
                       "dedup_key": trigger["dedup_key"]}
    _, resolved = bodies(both_channels, SLACK_PATH)
    assert resolved["text"].startswith("Resolved: Dead-letter queue length 0, at or below 8")
    assert "Resolved · dedup key `retryops/alert/dlq_length`" in str(resolved["blocks"])


def test_an_alert_that_resolves_before_its_trigger_went_out_sends_both_in_order(levels, pagerduty_only):
    accept(pagerduty_only)
    now = timezone.now()
    fire(now)
    resolve(now)

    send_due_notifications()

    assert [body["event_action"] for body in bodies(pagerduty_only, PAGERDUTY_PATH)] == ["trigger", "resolve"]
