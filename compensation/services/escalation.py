"""Escalation: the periodic safety net behind the dead letters and the on-call's pages. Its steps
(STEPS) each run on their own, each row in its own transaction, so one that fails is logged and
counted and the others still run."""

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import (
    DateTimeField,
    Exists,
    ExpressionWrapper,
    F,
    OuterRef,
    Q,
    QuerySet,
)
from django.urls import reverse
from django.utils import timezone

from audit.choices import AuditAction
from audit.services import record_audit
from compensation.choices import (
    WORK_ORDER_LIVE,
    WORK_ORDER_TERMINAL,
    DeadLetterState,
    WorkOrderState,
)
from compensation.models import DeadLetter
from compensation.notifications.models import (
    Notification,
    NotificationEvent,
    NotificationState,
    NotificationSubject,
)
from compensation.notifications.notifiers import NOTIFIERS
from compensation.notifications.services import (
    queue_notification,
    send_after_commit,
    work_order_dedup_key,
)
from compensation.selectors import sla_limits
from compensation.work_orders.models import SLA_CLOCKS, SLA_START, WorkOrder
from compensation.work_orders.services import join_work_order
from retryops.errors import BadInput
from retryops.inputs import record_id

log = logging.getLogger(__name__)

STEPS = ("work_orders", "notifications", "breaches")
# Rows one run takes per step at most; the next run goes on where it stopped. Keeps one run
# short after an outage.
BATCH = 500
# What each SLA clock's breach means, for the page and the audit entry.
BREACH_WORDS = {
    "notice": "no page reached the on-call within {limit} s of its first dead letter",
    "acknowledge": "nobody acknowledged it within {limit} s of its first dead letter",
    "compensate": "it was not compensated within {limit} s of its first dead letter",
}


@dataclass
class Escalation:
    """What one escalate run did (or, dry, would do), per step; `failures` says what failed."""

    orphans: int = 0  # open dead letters given a work order
    work_orders: int = 0  # the work orders they joined or opened
    resent: int = 0  # failed notifications queued again
    breaches: dict[str, int] = field(default_factory=lambda: dict.fromkeys(SLA_CLOCKS, 0))
    failures: list[str] = field(default_factory=list)
    dry_run: bool = False
    steps: tuple[str, ...] = STEPS


def _fail(result: Escalation, what: str, exc: Exception) -> None:
    log.exception("escalate: %s failed", what)
    result.failures.append(f"{what}: {type(exc).__name__}: {exc}")


def parse_steps(steps) -> tuple[str, ...]:
    """Steps as a list or as "notifications,breaches"; None is all of them; an unknown one is refused by name."""
    if steps is None:
        return STEPS
    if isinstance(steps, str):
        steps = [s.strip() for s in steps.split(",") if s.strip()]
    if not isinstance(steps, (list, tuple, set, frozenset)) or not steps or not all(isinstance(s, str) for s in steps):
        raise BadInput(f"steps must name escalation steps ({', '.join(STEPS)}), got {steps!r}", field="steps")
    unknown = sorted(set(steps) - set(STEPS))
    if unknown:
        raise BadInput(f"unknown escalation step {', '.join(unknown)}: use {', '.join(STEPS)}", field="steps",
                       unknown=unknown)
    return tuple(s for s in STEPS if s in steps)


# 1. Dead letters without a live work order.

def orphaned_dead_letters(*, before: datetime | None = None) -> QuerySet[DeadLetter]:
    """Open dead letters nobody has to act on: no work order (it was deleted, which SET_NULL
    allows), or one that ended while they stayed open, which is what cancelling does ("opened by
    mistake: its dead letters stay open for another work order"); compensating or closing
    resolves them instead. A replaying one is left to follow_replays, which gives it a live
    work order if its replay dies. With `before`, only those orphaned before then: a letter is
    orphaned from its death, or from its work order's end if that came later (a letter that died
    last week and whose work order was cancelled a second ago has been nobody's for a second)."""
    orphans = DeadLetter.objects.filter(state=DeadLetterState.OPEN).filter(
        Q(work_order__isnull=True) | Q(work_order__state__in=WORK_ORDER_TERMINAL))
    if before is None:
        return orphans
    # An ended work order always has its ended_at (work_order_ended_has_time).
    return orphans.filter(Q(work_order__isnull=True) | Q(work_order__ended_at__lt=before), died_at__lt=before)


def _give_work_orders(result: Escalation, *, now: datetime, dry_run: bool) -> None:
    orphans = orphaned_dead_letters()
    groups = orphans.values_list("flow", "error_signature").distinct().order_by("flow", "error_signature")
    if dry_run:
        result.orphans, result.work_orders = orphans.count(), groups.count()
        return
    # In (flow, signature) order, as collect_dead_letters locks work orders: no waiting in a cycle.
    for flow, signature in groups[:BATCH]:
        try:
            with transaction.atomic():
                letters = list(orphans.filter(flow=flow, error_signature=signature)
                               .select_for_update(of=("self",), skip_locked=True).order_by("id")[:BATCH])
                if not letters:
                    continue  # another escalator has them
                order = join_work_order(flow=flow, error_signature=signature, pool_id=letters[0].pool_id,
                                        died=[letter.died_at for letter in letters])
                DeadLetter.objects.filter(pk__in=[letter.pk for letter in letters]).update(
                    work_order=order, updated_at=timezone.now())
        except Exception as exc:
            _fail(result, f"work order for {flow} / {signature or 'no signature'}", exc)
            continue
        result.orphans += len(letters)
        result.work_orders += 1


# 2. Failed notifications, sent again.

def resendable_notifications(*, now: datetime) -> QuerySet[Notification]:
    """Failed notifications whose last try is RETRYOPS_NOTIFY_RESEND_AFTER old, sent again fewer
    than RETRYOPS_NOTIFY_MAX_RESENDS times, on a channel configured now (a skipped one stays
    skipped), and still the latest word of their incident on their channel: a trigger that
    failed before its work order's resolve went out must not open an incident nobody resolves."""
    later = Notification.objects.filter(subject_type=OuterRef("subject_type"), subject_id=OuterRef("subject_id"),
                                        channel=OuterRef("channel"), dedup_key=OuterRef("dedup_key"),
                                        id__gt=OuterRef("id"))
    configured = [channel for channel, notifier in NOTIFIERS.items() if not notifier().not_configured()]
    cutoff = now - timedelta(seconds=settings.RETRYOPS_NOTIFY_RESEND_AFTER)
    return (Notification.objects.filter(state=NotificationState.FAILED, last_attempt_at__lte=cutoff,
                                        resends__lt=settings.RETRYOPS_NOTIFY_MAX_RESENDS, channel__in=configured)
            .exclude(Exists(later)))


def _resend_failed(result: Escalation, *, now: datetime, dry_run: bool) -> None:
    due = resendable_notifications(now=now)
    if dry_run:
        result.resent = due.count()
        return
    for pk in list(due.order_by("id").values_list("pk", flat=True)[:BATCH]):
        try:
            with transaction.atomic():
                row = due.filter(pk=pk).select_for_update(skip_locked=True).first()
                if row is None:
                    continue  # sent again by an operator or another escalator meanwhile
                before = {"state": row.state, "attempts": row.attempts, "resends": row.resends,
                          "last_error": row.last_error}
                # A fresh round of attempts with backoff, as an operator's "send again" gives.
                Notification.objects.filter(pk=pk, state=NotificationState.FAILED).update(
                    state=NotificationState.QUEUED, attempts=0, next_attempt_at=timezone.now(),
                    resends=F("resends") + 1)
                record_audit(action=AuditAction.NOTIFICATION_RESEND, target=row, before=before,
                             after={"state": NotificationState.QUEUED, "resends": row.resends + 1},
                             reason=f"escalate: failed for over {settings.RETRYOPS_NOTIFY_RESEND_AFTER} s; "
                                    f"resend {row.resends + 1} of {settings.RETRYOPS_NOTIFY_MAX_RESENDS}")
                send_after_commit()
        except Exception as exc:
            _fail(result, f"resend of notification {pk}", exc)
            continue
        result.resent += 1


# 3. SLA breaches.

def breached_work_orders(clock: str, *, now: datetime) -> QuerySet[WorkOrder]:
    """Live work orders whose `clock` ran out and is not marked yet, annotated with `breached_at`
    (when it ran out). notice: no trigger page was sent (on any channel) by the deadline;
    acknowledge: still open; compensate: still live. A work order that ended is not paged about
    (its incident is resolved). The live ones are few: work_order_live_idx."""
    if clock not in SLA_CLOCKS:
        raise BadInput(f"clock must be one of {', '.join(SLA_CLOCKS)}, got {clock!r}", field="clock")
    limit = timedelta(seconds=sla_limits()[clock])
    orders = (WorkOrder.objects.filter(state__in=WORK_ORDER_LIVE, **{f"{clock}_breached_at__isnull": True})
              .annotate(sla_start=SLA_START).filter(sla_start__lt=now - limit)
              .annotate(breached_at=ExpressionWrapper(F("sla_start") + limit, output_field=DateTimeField())))
    if clock == "acknowledge":
        orders = orders.filter(state=WorkOrderState.OPEN)
    elif clock == "notice":
        # notification_subject_idx: the work order's own pages (an alert's id may equal its id).
        paged = Notification.objects.filter(
            subject_type=NotificationSubject.WORK_ORDER, subject_id=OuterRef("pk"), event=NotificationEvent.TRIGGER,
            state=NotificationState.SENT,
            sent_at__lte=ExpressionWrapper(OuterRef("sla_start") + limit, output_field=DateTimeField()))
        orders = orders.exclude(Exists(paged))
    return orders


def _page_breach(order: WorkOrder, clock: str, breached_at: datetime) -> None:
    """Re-trigger the work order's own incident, critical, with the breach in its summary: PagerDuty
    appends it to the open incident (or opens it, if the first trigger never got through), the
    work order's resolve still closes it, and Slack shows the message. A dedup key of its own
    would open a second incident that nothing ever resolves."""
    limit = sla_limits()[clock]
    queue_notification(
        event=NotificationEvent.TRIGGER, dedup_key=work_order_dedup_key(order.pk), subject_id=order.pk,
        subject_label=str(order), severity="critical",
        summary=f"SLA breached ({clock}): work order {order.pk}, {BREACH_WORDS[clock].format(limit=limit)}: "
                f"{order.title}",
        details={"sla": clock, "limit_seconds": limit, "breached_at": breached_at.isoformat(),
                 "state": order.state, "flow": order.flow, "error_signature": order.error_signature,
                 "dead_letters": order.dead_letter_count, "assignee": order.assignee},
        link=reverse("admin:compensation_workorder_change", args=[order.pk]))


def mark_breach(*, work_order: int, clock: str, now: datetime | None = None) -> bool:
    """Mark `clock` breached on one work order if it is (still) breached and not marked yet, with
    its audit entry and its page, in one transaction. The conditional UPDATE is the claim: of two
    escalators, the second finds the mark set and does nothing. Returns whether it marked it."""
    work_order = record_id(work_order, field="work_order", error=BadInput)
    now = now or timezone.now()
    column = f"{clock}_breached_at"
    with transaction.atomic():
        found = breached_work_orders(clock, now=now).filter(pk=work_order).values_list("breached_at", flat=True)
        breached_at = found.first()
        if breached_at is None:
            return False
        # The state is checked again by the UPDATE, which re-reads a row it waited for: a work
        # order ended meanwhile has had its resolve queued, and a trigger now would open an
        # incident nobody resolves.
        still = {"state": WorkOrderState.OPEN} if clock == "acknowledge" else {"state__in": WORK_ORDER_LIVE}
        if WorkOrder.objects.filter(pk=work_order, **{f"{column}__isnull": True}, **still).update(
                **{column: breached_at, "updated_at": timezone.now()}) != 1:
            return False
        order = WorkOrder.objects.get(pk=work_order)
        limit = sla_limits()[clock]
        record_audit(action=AuditAction.WORK_ORDER_SLA_BREACH, target=order, before={column: None},
                     after={column: breached_at.isoformat(), "sla": clock, "limit_seconds": limit},
                     reason=f"{clock} SLA breached: {BREACH_WORDS[clock].format(limit=limit)}")
        _page_breach(order, clock, breached_at)
    return True


def _mark_breaches(result: Escalation, *, now: datetime, dry_run: bool) -> None:
    for clock in SLA_CLOCKS:
        orders = breached_work_orders(clock, now=now)
        if dry_run:
            result.breaches[clock] = orders.count()
            continue
        for pk in list(orders.order_by("pk").values_list("pk", flat=True)[:BATCH]):
            try:
                marked = mark_breach(work_order=pk, clock=clock, now=now)
            except Exception as exc:
                _fail(result, f"{clock} breach of work order {pk}", exc)
                continue
            result.breaches[clock] += marked


_RUN = {"work_orders": _give_work_orders, "notifications": _resend_failed,
        "breaches": _mark_breaches}


def escalate(*, now: datetime | None = None, steps: Iterable[str] | str | None = None,
             dry_run: bool = False) -> Escalation:
    """Run the escalation steps (all, or those named) at `now` (default: the current time):
    give orphaned dead letters a work order, send failed notifications
    again, mark SLA breaches. A step or a row that fails is logged and counted in `failures`;
    the rest still run. `dry_run` counts what it would do and changes nothing."""
    steps = parse_steps(steps)
    if now is None:
        now = timezone.now()
    elif not isinstance(now, datetime) or timezone.is_naive(now):
        raise BadInput(f"now must be an aware datetime, got {now!r}", field="now")
    result = Escalation(dry_run=dry_run, steps=steps)
    for step in steps:
        try:
            _RUN[step](result, now=now, dry_run=dry_run)
        except Exception as exc:
            _fail(result, step.replace("_", " "), exc)
    return result
