"""Findings of the issue-11 review, each reproduced by the test that failed before its fix."""

from datetime import timedelta

import pytest
from django.utils import timezone

from compensation.notifications.models import Notification, NotificationState
from compensation.notifications.services import send_due_notifications
from telemetry.alerts.services import FIRED, RESOLVED, evaluate_alert
from tests.compensation.notify_fixtures import PAGERDUTY_PATH, SLACK_PATH, page

pytestmark = pytest.mark.django_db


@pytest.fixture
def slack_gone(levels, both_channels):
    """PagerDuty takes every message; Slack's webhook was removed (404: no retry can help)."""
    levels.RETRYOPS_ALERT_NOTIFICATION_WINDOW_SECONDS = 600
    both_channels.expect_request(PAGERDUTY_PATH).respond_with_json({"status": "success"}, status=202)
    both_channels.expect_request(SLACK_PATH).respond_with_data("no_service", status=404)
    return both_channels


def send_at(moment) -> None:
    """Send what is due, as the sender would have at `moment` (its failures dated then)."""
    before = set(Notification.objects.values_list("pk", flat=True).filter(state=NotificationState.FAILED))
    send_due_notifications()
    Notification.objects.filter(state=NotificationState.FAILED).exclude(pk__in=before).update(last_attempt_at=moment)


def test_the_failed_notifications_alert_is_not_fired_again_by_its_own_resolve_failing(slack_gone):
    now = timezone.now()
    page(7)
    send_at(now)  # the work order's Slack message fails
    assert evaluate_alert(rule="notification_failed", now=now) == FIRED
    send_at(now)  # the alert's own Slack message fails too
    quiet = now + timedelta(seconds=601)  # every failure is out of the window
    evaluate_alert(rule="notification_failed", now=quiet)
    assert evaluate_alert(rule="notification_failed", now=quiet + timedelta(seconds=60)) == RESOLVED
    send_at(quiet + timedelta(seconds=60))  # the resolve's Slack message fails as well

    # Nothing but the alert's own resolve failed since: it must not open a new incident.
    assert evaluate_alert(rule="notification_failed", now=quiet + timedelta(seconds=61)) != FIRED


OPENMETRICS = "application/openmetrics-text; version=1.0.0"


def test_a_dead_letter_stamped_before_its_task_died_by_another_hosts_clock_keeps_openmetrics_valid(client):
    from prometheus_client.openmetrics.parser import text_string_to_metric_families

    from tests.factories import DeadLetterFactory

    # The worker's host runs 2 s ahead of the collector's: the task "died" after its dead letter was made.
    DeadLetterFactory(task__finished_at=timezone.now() + timedelta(seconds=2))

    response = client.get("/metrics", HTTP_ACCEPT=OPENMETRICS)

    assert response["Content-Type"].startswith("application/openmetrics-text")
    families = {family.name: family for family in text_string_to_metric_families(response.content.decode())}
    assert families["dead_letter_to_work_order_seconds"].samples


def test_an_alerts_page_does_not_count_as_the_page_of_the_work_order_with_its_id(both_channels):
    from compensation.notifications.models import NotificationSubject
    from compensation.notifications.services import queue_notification
    from telemetry.figures.selectors import acceptance_figures
    from tests.factories import WorkOrderFactory

    both_channels.expect_request(PAGERDUTY_PATH).respond_with_json({"status": "success"}, status=202)
    both_channels.expect_request(SLACK_PATH).respond_with_data("ok")
    now = timezone.now()
    order = WorkOrderFactory(source="dead_letters", flow="demo", error_signature="A",
                             first_dead_at=now - timedelta(minutes=5), last_dead_at=now - timedelta(minutes=5))
    # An alert whose id is the work order's pages both channels; nobody was paged about the work order.
    queue_notification(event="trigger", dedup_key="retryops/alert/component_silent", subject_id=order.pk,
                       subject_type=NotificationSubject.ALERT, summary="Workers or scheduler silent", details={},
                       link="/admin/")
    send_due_notifications()

    figure = acceptance_figures(seconds=3600, now=now)["dead_letter_to_work_order_p50"]
    assert figure.counts == {"work_orders": 1, "paged": 0, "not_paged": 1}
