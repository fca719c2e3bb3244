"""Escalation: orphaned dead letters given a work order, failed
notifications sent again within a cap, SLA breaches marked once and paged; each step alone."""

import threading
from datetime import timedelta

import pytest
from django.db import connection, connections, transaction
from django.utils import timezone

from audit.models import AuditEntry
from compensation.choices import WorkOrderState
from compensation.models import DeadLetter
from compensation.notifications.models import Notification, NotificationState
from compensation.notifications.services import (
    queue_notification,
    send_due_notifications,
    work_order_dedup_key,
)
from compensation.services import escalation
from compensation.services.dead_letters import collect_dead_letters, discard_dead_letter
from compensation.services.escalation import escalate, mark_breach
from compensation.work_orders.models import WorkOrder
from compensation.work_orders.services import (
    acknowledge_work_order,
    cancel_work_order,
    close_work_order,
    start_work_order,
)
from retryops.errors import BadInput
from tests.compensation.conftest import dead_tasks
from tests.compensation.notify_fixtures import (
    PAGERDUTY_PATH,
    SLACK_PATH,
    accept,
    bodies,
    page,
    pagerduty_event_validator,
    resolve,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def order(pool, instant_policy, no_channels) -> WorkOrder:
    """A work order of two dead letters; its trigger page was skipped (no channel configured)."""
    dead_tasks(pool=pool, policy=instant_policy, n=2)
    collect_dead_letters()
    return WorkOrder.objects.get()


def after(order: WorkOrder, seconds: float):
    """`seconds` after the work order's SLA clocks started."""
    return order.first_dead_at + timedelta(seconds=seconds)


def breach_entries(order):
    return AuditEntry.objects.filter(action="work_order.sla_breach", target_id=str(order.pk))


def breach_pages(order, clock):
    """The Slack messages about one breach (stored even when the channel skipped them)."""
    return Notification.objects.filter(subject_id=order.pk, channel="slack",
                                       payload__text__startswith=f"SLA breached ({clock})")


# dead letters without a live work order


def test_dead_letters_left_open_by_a_cancelled_work_order_get_a_new_one(order):
    cancel_work_order(work_order=order, actor="ops:carol", reason="grouped wrongly")
    result = escalate()
    new = WorkOrder.objects.exclude(pk=order.pk).get()
    assert (result.orphans, result.work_orders) == (2, 1)
    assert (new.state, new.dead_letter_count) == (WorkOrderState.OPEN, 2)
    assert set(DeadLetter.objects.values_list("work_order", flat=True)) == {new.pk}


def test_an_open_dead_letter_without_a_work_order_joins_the_live_one_of_its_signature(order, pool, instant_policy):
    dead_tasks(pool=pool, policy=instant_policy)
    [stray] = collect_dead_letters()
    DeadLetter.objects.filter(pk=stray.pk).update(work_order=None)
    escalate()
    assert DeadLetter.objects.get(pk=stray.pk).work_order_id == order.pk
    assert WorkOrder.objects.get(pk=order.pk).dead_letter_count == 4  # 3 collected, 1 joined again


def test_a_settled_dead_letter_of_a_cancelled_work_order_needs_no_work_order(order):
    cancel_work_order(work_order=order, actor="ops:carol", reason="grouped wrongly")
    for letter in DeadLetter.objects.all():
        discard_dead_letter(dead_letter=letter, actor="ops:carol")
    assert escalate().orphans == 0
    assert WorkOrder.objects.count() == 1


# failed notifications


@pytest.fixture
def failing_pagerduty(pagerduty_only, settings):
    """PagerDuty answers 503 and one try is all a notification gets before it is failed."""
    settings.RETRYOPS_NOTIFY_MAX_ATTEMPTS = 1
    pagerduty_only.expect_request(PAGERDUTY_PATH).respond_with_data("down", status=503)
    return pagerduty_only


def failed_page(work_order_id: int = 7) -> Notification:
    [row] = [row for row in page(work_order_id) if row.channel == "pagerduty"]
    send_due_notifications()
    row.refresh_from_db()
    assert row.state == NotificationState.FAILED
    return row


def test_a_failed_notification_is_queued_again_once_its_last_try_is_old_enough(failing_pagerduty, settings):
    row = failed_page()
    assert escalate(now=row.last_attempt_at + timedelta(seconds=3599)).resent == 0
    result = escalate(now=row.last_attempt_at + timedelta(seconds=3600))
    row.refresh_from_db()
    assert result.resent == 1
    assert (row.state, row.attempts, row.resends) == (NotificationState.QUEUED, 0, 1)
    assert AuditEntry.objects.filter(action="notification.resend", target_id=str(row.pk)).count() == 1


def test_a_notification_that_keeps_failing_is_not_queued_again_past_the_cap(failing_pagerduty, settings):
    settings.RETRYOPS_NOTIFY_MAX_RESENDS = 2
    row = failed_page()
    for _ in range(3):
        escalate(now=timezone.now() + timedelta(hours=2))
        send_due_notifications()
    row.refresh_from_db()
    assert (row.state, row.resends) == (NotificationState.FAILED, 2)
    assert len(bodies(failing_pagerduty, PAGERDUTY_PATH)) == 3  # the first send and two resends


def test_a_skipped_notification_stays_skipped(no_channels):
    rows = page()
    escalate(now=timezone.now() + timedelta(days=1))
    assert {row.state for row in Notification.objects.filter(pk__in=[r.pk for r in rows])} == {
        NotificationState.SKIPPED}


def test_a_failed_trigger_is_not_sent_again_once_its_work_orders_resolve_went_out(failing_pagerduty):
    row = failed_page()
    failing_pagerduty.clear()
    accept(failing_pagerduty)
    resolve(7)
    send_due_notifications()
    assert escalate(now=timezone.now() + timedelta(hours=2)).resent == 0
    assert Notification.objects.get(pk=row.pk).state == NotificationState.FAILED


# SLA breaches


def test_an_open_work_order_past_its_acknowledge_clock_is_marked_when_the_clock_ran_out(order, settings):
    escalate(now=after(order, settings.RETRYOPS_SLA_ACKNOWLEDGE_SECONDS + 60))
    order.refresh_from_db()
    assert order.acknowledge_breached_at == after(order, settings.RETRYOPS_SLA_ACKNOWLEDGE_SECONDS)
    assert order.compensate_breached_at is None


def test_a_breach_is_marked_once_when_escalate_runs_twice(order, settings):
    later = after(order, settings.RETRYOPS_SLA_ACKNOWLEDGE_SECONDS + 60)
    first, second = escalate(now=later), escalate(now=later + timedelta(seconds=60))
    assert (first.breaches["acknowledge"], second.breaches["acknowledge"]) == (1, 0)
    assert breach_entries(order).filter(after__sla="acknowledge").count() == 1
    assert breach_pages(order, "acknowledge").count() == 1


def test_an_acknowledged_work_order_breaches_no_acknowledge_clock(order, settings):
    acknowledge_work_order(work_order=order, actor="ops:carol")
    result = escalate(now=after(order, settings.RETRYOPS_SLA_ACKNOWLEDGE_SECONDS + 60))
    assert result.breaches["acknowledge"] == 0
    assert WorkOrder.objects.get(pk=order.pk).acknowledge_breached_at is None


def test_a_live_work_order_past_its_compensate_clock_is_marked(order, settings):
    start_work_order(work_order=order, actor="ops:carol")
    result = escalate(now=after(order, settings.RETRYOPS_SLA_COMPENSATE_SECONDS + 1))
    assert result.breaches == {"notice": 1, "acknowledge": 0, "compensate": 1}
    assert WorkOrder.objects.get(pk=order.pk).compensate_breached_at is not None


def test_an_ended_work_order_is_not_marked(order, settings):
    close_work_order(work_order=order, actor="ops:carol")
    result = escalate(now=after(order, settings.RETRYOPS_SLA_COMPENSATE_SECONDS + 1))
    assert result.breaches == {"notice": 0, "acknowledge": 0, "compensate": 0}


def test_a_work_order_whose_trigger_was_never_sent_breaches_its_notice_clock(order, settings):
    result = escalate(now=after(order, settings.RETRYOPS_SLA_NOTICE_SECONDS + 1))
    assert result.breaches["notice"] == 1
    assert WorkOrder.objects.get(pk=order.pk).notice_breached_at == after(order, settings.RETRYOPS_SLA_NOTICE_SECONDS)
    entry = breach_entries(order).get()
    assert (entry.channel, entry.after["sla"]) == ("system", "notice")


def test_a_trigger_sent_in_time_meets_the_notice_clock(pool, instant_policy, pagerduty_only, settings):
    accept(pagerduty_only)
    dead_tasks(pool=pool, policy=instant_policy)
    collect_dead_letters()
    send_due_notifications()
    order = WorkOrder.objects.get()
    assert escalate(now=after(order, settings.RETRYOPS_SLA_NOTICE_SECONDS + 1)).breaches["notice"] == 0


def test_an_alerts_page_whose_id_is_the_work_orders_does_not_meet_its_notice_clock(order, pagerduty_only,
                                                                                     settings):
    """Notifications about alerts share the subject_id column with work orders': only the work
    order's own pages stop its notice clock."""
    accept(pagerduty_only)
    queue_notification(event="trigger", dedup_key="retryops/alert/dlq_length", subject_type="alert",
                       subject_id=order.pk, summary="Dead-letter queue length 120 is above 100", details={},
                       link="/admin/telemetry/alert/1/change/")
    send_due_notifications()
    assert Notification.objects.get(subject_type="alert", channel="pagerduty").state == NotificationState.SENT
    assert escalate(now=after(order, settings.RETRYOPS_SLA_NOTICE_SECONDS + 1)).breaches["notice"] == 1


def test_a_breach_re_triggers_the_work_orders_own_incident_as_critical(pool, instant_policy, both_channels, settings):
    accept(both_channels)
    dead_tasks(pool=pool, policy=instant_policy)
    collect_dead_letters()
    send_due_notifications()
    order = WorkOrder.objects.get()
    escalate(now=after(order, settings.RETRYOPS_SLA_ACKNOWLEDGE_SECONDS + 1))
    send_due_notifications()
    opened, breached = bodies(both_channels, PAGERDUTY_PATH)
    pagerduty_event_validator().validate(breached)
    assert (breached["event_action"], breached["dedup_key"]) == ("trigger", opened["dedup_key"])
    assert opened["dedup_key"] == work_order_dedup_key(order.pk)
    assert breached["payload"]["severity"] == "critical" and breached["payload"]["custom_details"]["sla"] == \
        "acknowledge"
    slack = bodies(both_channels, SLACK_PATH)[-1]
    assert slack["text"].startswith(f"SLA breached (acknowledge): work order {order.pk}, nobody acknowledged it")


@pytest.mark.django_db(transaction=True)
def test_two_escalators_racing_for_one_breach_mark_it_once(order, settings):
    """The second escalator reads the work order as unmarked before the first commits; its
    conditional UPDATE waits for the first, then finds the mark set and does nothing."""
    later = after(order, settings.RETRYOPS_SLA_ACKNOWLEDGE_SECONDS + 1)
    second = {}

    def second_escalator():
        try:
            second["marked"] = mark_breach(work_order=order.pk, clock="acknowledge", now=later)
        finally:
            connections.close_all()

    with transaction.atomic():
        assert mark_breach(work_order=order.pk, clock="acknowledge", now=later)
        racer = threading.Thread(target=second_escalator)
        racer.start()
        wait_for_a_lock_wait()
    racer.join(timeout=30)
    assert second == {"marked": False}
    assert breach_entries(order).filter(after__sla="acknowledge").count() == 1


@pytest.mark.django_db(transaction=True)
def test_a_work_order_closed_while_its_breach_is_marked_is_not_paged_after_its_resolve(order, settings):
    """The escalator reads the work order as live before the operator's close commits; its
    conditional UPDATE waits for the close, then finds it ended and pages nobody."""
    later = after(order, settings.RETRYOPS_SLA_ACKNOWLEDGE_SECONDS + 1)
    escalator = {}

    def escalate_now():
        try:
            escalator["marked"] = mark_breach(work_order=order.pk, clock="acknowledge", now=later)
        finally:
            connections.close_all()

    with transaction.atomic():
        close_work_order(work_order=order.pk, actor="ops:carol")
        racer = threading.Thread(target=escalate_now)
        racer.start()
        wait_for_a_lock_wait()
    racer.join(timeout=30)
    assert escalator == {"marked": False}
    assert not breach_pages(order, "acknowledge").exists() and not breach_entries(order).exists()


def wait_for_a_lock_wait() -> None:
    """Until another session waits for a row lock (the racer's UPDATE), or 20 s have passed."""
    deadline = timezone.now() + timedelta(seconds=20)
    with connection.cursor() as cursor:
        while timezone.now() < deadline:
            # pg_locks, not pg_stat_activity: the latter is read once per transaction.
            cursor.execute("SELECT count(*) FROM pg_locks WHERE NOT granted")
            if cursor.fetchone()[0]:
                return
            cursor.execute("SELECT pg_sleep(0.05)")
    raise AssertionError("the second escalator never waited for the first one's row lock")


# each step alone


def test_a_step_that_raises_does_not_stop_the_others(order, settings, monkeypatch):
    def broken(**kwargs):
        raise RuntimeError("database unreachable")

    monkeypatch.setattr(escalation, "orphaned_dead_letters", broken)
    result = escalate(now=after(order, settings.RETRYOPS_SLA_ACKNOWLEDGE_SECONDS + 1))
    assert result.failures == ["work orders: RuntimeError: database unreachable"]
    assert result.breaches["acknowledge"] == 1


def test_a_work_order_whose_breach_fails_does_not_stop_the_others(order, pool, instant_policy, settings,
                                                                  monkeypatch):
    dead_tasks(pool=pool, policy=instant_policy, signature="KeyError: sku")
    collect_dead_letters()
    other = WorkOrder.objects.exclude(pk=order.pk).get()
    real = escalation._page_breach

    def page_fails_for_the_first(work_order, clock, breached_at):
        if work_order.pk == order.pk:
            raise RuntimeError("summary refused")
        real(work_order, clock, breached_at)

    monkeypatch.setattr(escalation, "_page_breach", page_fails_for_the_first)
    result = escalate(now=after(order, settings.RETRYOPS_SLA_ACKNOWLEDGE_SECONDS + 60), steps="breaches")
    assert f"acknowledge breach of work order {order.pk}: RuntimeError: summary refused" in result.failures
    assert WorkOrder.objects.get(pk=other.pk).acknowledge_breached_at is not None
    assert WorkOrder.objects.get(pk=order.pk).acknowledge_breached_at is None  # nothing half-written
    assert not breach_entries(order).exists()


def test_a_dry_run_counts_what_it_would_do_and_changes_nothing(order, settings):
    cancel_work_order(work_order=order, actor="ops:carol", reason="grouped wrongly")
    audit_before = AuditEntry.objects.count()
    result = escalate(now=after(order, settings.RETRYOPS_SLA_ACKNOWLEDGE_SECONDS + 60), dry_run=True)
    assert (result.dry_run, result.orphans, result.work_orders) == (True, 2, 1)
    assert WorkOrder.objects.count() == 1
    assert AuditEntry.objects.count() == audit_before
    assert escalate().orphans == 2  # the dry run left them for the real one


def test_an_unknown_step_is_refused_by_name_before_anything_runs(order):
    cancel_work_order(work_order=order, actor="ops:carol", reason="grouped wrongly")
    with pytest.raises(BadInput, match="unknown escalation step breach: use work_orders, notifications") as refused:
        escalate(steps="work_orders,breach")
    assert refused.value.details["field"] == "steps"
    assert WorkOrder.objects.count() == 1  # the work orders step, named first, did not run


def test_a_naive_now_is_refused(db):
    with pytest.raises(BadInput, match="now must be an aware datetime"):
        escalate(now=timezone.now().replace(tzinfo=None))
