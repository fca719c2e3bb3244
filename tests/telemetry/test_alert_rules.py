"""The alert rules: what each reads from the database (or the heartbeats), and says about it."""

from dataclasses import dataclass
from datetime import timedelta

import pytest
from django.utils import timezone

from compensation.models import DeadLetter
from compensation.notifications.models import NotificationState
from compensation.services.dead_letters import collect_dead_letters, discard_dead_letter
from compensation.work_orders.services import cancel_work_order
from scheduling.selectors import retry_outcomes
from telemetry.alerts.rules import RULES
from telemetry.figures.models import AcceptanceSnapshot
from telemetry.metrics.rollup import roll_up_metrics
from tests.compensation.conftest import dead_tasks
from tests.factories import TaskFactory, WorkOrderFactory
from tests.compensation.notify_fixtures import page
from tests.telemetry.conftest import open_dead_letters, retries

pytestmark = pytest.mark.django_db


@dataclass
class Said:
    value: float | None
    detail: str


def read(rule: str, *, now=None) -> Said:
    """What a rule reads, and what it says about it (in English, as stored and sent)."""
    reading = RULES[rule].read(now=now or timezone.now())
    return Said(reading.value, RULES[rule].describe(reading.facts))


# retry failure rate


def test_the_failure_rate_is_the_share_of_ended_retries_that_failed_or_died(levels):
    retries(succeeded=16, failed=3, dead=1)

    reading = read("retry_failure_rate")

    assert reading.value == pytest.approx(0.2)
    assert reading.detail == "4 of 20 retries failed in the last 10 min (1 of them dead)"


def test_the_failure_rate_agrees_with_the_dashboards_retry_outcomes(levels):
    retries(succeeded=30, failed=5, dead=2)
    now = timezone.now()
    outcomes = retry_outcomes(since=now - timedelta(minutes=10), until=now)

    assert read("retry_failure_rate", now=now).value == (outcomes["failed"] + outcomes["dead"]) / sum(outcomes.values())


def test_one_failure_of_two_retries_is_not_judged(levels):
    retries(succeeded=1, failed=1)

    reading = read("retry_failure_rate")

    assert reading.value is None
    assert reading.detail == "2 retries ended in the last 10 min, fewer than the 20 needed to judge"


def test_retries_that_ended_before_the_window_are_not_counted(levels):
    retries(succeeded=20)
    retries(failed=20, ago=timedelta(minutes=11))

    assert read("retry_failure_rate").value == 0


# dead-letter queue length


def test_the_dlq_length_counts_open_dead_letters_only(levels):
    letters = open_dead_letters(3)
    discard_dead_letter(dead_letter=letters[0], actor="ops:carol")

    reading = read("dlq_length")

    assert (reading.value, reading.detail) == (2, "2 open dead letters")


# work order creation


def test_a_dead_task_the_consumer_never_collected_counts_once_the_delay_passed(pool, instant_policy, settings):
    dead_tasks(pool=pool, policy=instant_policy, n=2)
    late = timezone.now() + timedelta(seconds=settings.RETRYOPS_ALERT_WORK_ORDER_AFTER_SECONDS + 1)

    assert read("work_order_creation_failed").value == 0
    reading = read("work_order_creation_failed", now=late)
    assert reading.value == 2
    assert reading.detail.startswith("2 dead tasks not made dead letters and 0 open dead letters without a live")


def test_dead_tasks_made_dead_letters_with_a_work_order_count_nothing(pool, instant_policy, settings):
    dead_tasks(pool=pool, policy=instant_policy, n=2)
    collect_dead_letters()
    late = timezone.now() + timedelta(seconds=settings.RETRYOPS_ALERT_WORK_ORDER_AFTER_SECONDS + 1)

    assert read("work_order_creation_failed", now=late).value == 0


def test_open_dead_letters_of_a_cancelled_work_order_count_from_the_cancellation(pool, instant_policy, settings):
    dead_tasks(pool=pool, policy=instant_policy, n=2)
    [letter, _] = collect_dead_letters()
    delay = timedelta(seconds=settings.RETRYOPS_ALERT_WORK_ORDER_AFTER_SECONDS + 1)
    DeadLetter.objects.update(died_at=timezone.now() - 2 * delay)  # they died long ago
    cancel_work_order(work_order=letter.work_order_id, actor="ops:carol", reason="opened by mistake")

    assert read("work_order_creation_failed").value == 0
    assert read("work_order_creation_failed", now=timezone.now() + delay).value == 2


# notifications


def test_notifications_that_failed_within_the_window_count_by_channel(no_channels, settings):
    rows = page(7) + page(8)
    for row in rows:
        row.state, row.last_attempt_at = NotificationState.FAILED, timezone.now()
        row.save(update_fields=["state", "last_attempt_at"])
    window = timedelta(seconds=settings.RETRYOPS_ALERT_NOTIFICATION_WINDOW_SECONDS)

    reading = read("notification_failed")

    assert reading.value == 4
    assert reading.detail == "4 notifications failed in the last 1 h (2 to pagerduty, 2 to slack)"
    assert read("notification_failed", now=timezone.now() + window + timedelta(seconds=1)).value == 0


def test_skipped_notifications_are_not_failures(no_channels):
    page(7)

    assert read("notification_failed").value == 0


# workers and scheduler


def test_silent_workers_are_counted_and_named(heartbeats):
    heartbeats.silent = ["worker periodic", "scheduler"]

    reading = read("component_silent")

    assert (reading.value, reading.detail) == (2, "not seen for a minute: scheduler, worker periodic")


def test_no_silent_component_reads_zero(heartbeats):
    assert (read("component_silent").value, read("component_silent").detail) == (
        0, "every worker and the scheduler seen")


def test_many_silent_workers_are_counted_and_the_first_named(heartbeats):
    heartbeats.silent = [f"worker {i:02}" for i in range(25)]

    reading = read("component_silent")

    assert reading.value == 25 and reading.detail.endswith("worker 19 and 5 more")


# retries overdue


def test_waiting_tasks_due_more_than_five_minutes_ago_are_overdue(pool):
    now = timezone.now()
    TaskFactory(pool=pool, state="retrying", next_run_at=now - timedelta(minutes=6))
    TaskFactory(pool=pool, state="scheduled", next_run_at=now - timedelta(minutes=6))
    TaskFactory(pool=pool, state="retrying", next_run_at=now - timedelta(minutes=4))
    TaskFactory(pool=pool, state="succeeded", next_run_at=None, finished_at=now)

    assert read("retries_overdue", now=now) == Said(2, "2 waiting tasks due more than 5 min ago")


# metrics rollup stale


def test_the_rollup_is_stale_by_the_age_of_its_last_pass(pool):
    assert read("metrics_rollup_stale") == Said(None, "the metrics rollup has not run yet")
    roll_up_metrics()

    reading = read("metrics_rollup_stale", now=timezone.now() + timedelta(minutes=3))

    assert reading.value > RULES["metrics_rollup_stale"].threshold()
    assert reading.detail == "the metrics rollup last ran 3 min ago"


# work order SLA breached


def test_live_work_orders_past_an_sla_clock_are_counted_with_their_clocks():
    # Escalation pages each breach once, through the channels; this is what a site paged by
    # Alertmanager alone, or one whose escalation step fails, still hears.
    WorkOrderFactory(created_at=timezone.now() - timedelta(seconds=1000))  # open past the 900 s to acknowledge
    WorkOrderFactory(state="acknowledged", acknowledged_at=timezone.now())
    WorkOrderFactory(state="closed", created_at=timezone.now() - timedelta(days=3), acknowledged_at=timezone.now(),
                     ended_at=timezone.now())

    assert read("work_order_sla_breached") == Said(
        1, "1 live work order past its SLA (notice 0, acknowledge 1, compensate 0)")


# acceptance figures below target


def test_figures_below_their_targets_are_counted_and_named(settings):
    settings.RETRYOPS_SLA_NOTICE_SECONDS = 300
    AcceptanceSnapshot.objects.create(
        window_seconds=settings.RETRYOPS_FIGURES_WINDOW_SECONDS, computed_at=timezone.now(),
        figures={"retry_success_ratio": 0.85, "compensation_completion_ratio": 0.99,
                 "dead_letter_to_work_order_p99": 420.0, "retry_within_sla_ratio": 0.5})

    assert read("figures_below_target") == Said(2, "below target: retry_success_ratio 0.85 (target 0.9), "
                                                   "dead_letter_to_work_order_p99 420 (target 300)")


def test_figures_without_data_or_a_fresh_snapshot_miss_nothing(settings):
    assert read("figures_below_target").value is None
    AcceptanceSnapshot.objects.create(window_seconds=settings.RETRYOPS_FIGURES_WINDOW_SECONDS,
                                      computed_at=timezone.now(), figures={"retry_success_ratio": None})

    assert read("figures_below_target") == Said(0, "every watched acceptance figure meets its target, or has no data")


def test_rules_speak_the_readers_language():
    from django.utils import translation

    with translation.override("zh-hans"):
        said = RULES["dlq_length"].describe({"open": 12})

    assert said == "12 个未处理的死信"


def test_with_no_worker_running_the_silence_rule_names_every_queue_and_scheduler(redis_conn):
    from telemetry.health.heartbeats import QUEUES

    reading = read("component_silent")

    assert reading.value >= len(QUEUES)
    assert all(f"worker:{queue}" in reading.detail for queue in QUEUES)
