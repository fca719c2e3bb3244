"""The gauges of /metrics say what the rows say: now, or as the last rollup pass counted them
(the groupings of rows that can be many: waiting tasks, running attempts, dead letters, resources)."""

from datetime import timedelta

import pytest
from django.utils import timezone

from compensation.notifications.models import Notification
from telemetry.metrics.rollup import roll_up_metrics
from tests.factories import (
    AttemptFactory,
    DeadLetterFactory,
    ResourceFactory,
    TaskFactory,
    WorkOrderFactory,
)
from tests.telemetry.metrics_helpers import scrape, value

pytestmark = pytest.mark.django_db


def test_waiting_tasks_are_counted_by_state_and_those_long_due_as_overdue(pool):
    now = timezone.now()
    TaskFactory(pool=pool, state="retrying", next_run_at=now - timedelta(seconds=60))
    TaskFactory(pool=pool, state="retrying", next_run_at=now)  # due, within the dispatcher's grace
    TaskFactory(pool=pool, state="pending", next_run_at=now + timedelta(seconds=60))
    TaskFactory(pool=pool, state="succeeded", next_run_at=None, finished_at=now)
    roll_up_metrics()
    scraped = scrape()
    assert value(scraped, "retryops_tasks_waiting", flow="demo", pool="accounts", state="retrying") == 2
    assert value(scraped, "retryops_tasks_waiting", state="pending") == 1
    assert value(scraped, "retryops_tasks_waiting") == 3
    assert value(scraped, "retryops_retries_overdue") == 1


def test_running_attempts_are_counted_by_flow_and_pool(pool):
    AttemptFactory(task=TaskFactory(pool=pool, flow="noop", state="running", next_run_at=None))
    roll_up_metrics()
    assert value(scrape(), "retryops_attempts_running", flow="noop", pool="accounts") == 1


def test_the_dead_letter_queue_counts_open_dead_letters_by_flow(pool):
    DeadLetterFactory.create_batch(2, task__pool=pool)
    DeadLetterFactory(task__pool=pool, state="resolved", settled_at=timezone.now())
    roll_up_metrics()
    assert value(scrape(), "retryops_dlq_length", flow="demo") == 2


def test_live_work_orders_are_counted_by_state_and_past_each_sla_clock():
    WorkOrderFactory(created_at=timezone.now() - timedelta(seconds=1000))  # open past the 900 s to acknowledge
    WorkOrderFactory(state="acknowledged", acknowledged_at=timezone.now())
    WorkOrderFactory(state="closed", acknowledged_at=timezone.now(), ended_at=timezone.now())
    scraped = scrape()
    assert value(scraped, "retryops_work_orders_open", state="open") == 1
    assert value(scraped, "retryops_work_orders_open", state="acknowledged") == 1
    assert value(scraped, "retryops_work_orders_open", state="in_progress") == 0
    assert value(scraped, "retryops_sla_breaches", clock="acknowledge") == 1
    assert value(scraped, "retryops_sla_breaches", clock="notice") == 0


def test_resources_are_counted_by_pool_and_state_with_every_state_shown(pool):
    ResourceFactory.create_batch(2, pool=pool)
    ResourceFactory(pool=pool, state="quarantined", quarantine_reason="HTTP 403", quarantined_at=timezone.now())
    roll_up_metrics()
    scraped = scrape()
    assert value(scraped, "retryops_resources", pool="accounts", state="available") == 2
    assert value(scraped, "retryops_resources", pool="accounts", state="quarantined") == 1
    assert ("retryops_resources", (("pool", "accounts"), ("state", "in_use"))) in scraped


def test_failed_notifications_are_counted_by_channel():
    for state in ("failed", "failed", "sent"):
        Notification.objects.create(channel="slack", event="trigger", dedup_key="retryops/work_order/1", subject_id=1,
                                    payload={}, state=state, sent_at=timezone.now())
    scraped = scrape()
    assert value(scraped, "retryops_notifications_failed", channel="slack") == 2
    assert value(scraped, "retryops_notifications_failed", channel="pagerduty") == 0


def test_counted_gauges_change_at_the_next_rollup_pass_and_say_how_old_they_are(pool):
    assert ("retryops_metrics_rollup_age_seconds", ()) not in scrape()  # no pass yet
    roll_up_metrics()
    ResourceFactory(pool=pool)
    scraped = scrape()
    assert value(scraped, "retryops_resources", pool="accounts") == 0
    assert 0 <= value(scraped, "retryops_metrics_rollup_age_seconds") < 60
    roll_up_metrics()
    assert value(scrape(), "retryops_resources", pool="accounts", state="available") == 1
