"""Reads of dead letters and work orders shared by the admin, the commands and the API. No writes."""

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Count, Max, Min, QuerySet
from django.utils import timezone

from compensation.choices import WORK_ORDER_LIVE, DeadLetterState, WorkOrderState
from compensation.models import DeadLetter, WorkOrder
from compensation.notifications_models import Notification
from compensation.runbook_models import RunbookRun


@dataclass(frozen=True)
class Sla:
    """A work order's SLA clocks: how long each step took (or has been waiting), and which passed its limit."""

    notice_seconds: float | None
    acknowledge_seconds: float | None
    compensate_seconds: float | None
    breached: tuple[str, ...]

    @property
    def state(self) -> str:
        return "breached: " + ", ".join(self.breached) if self.breached else "ok"


def _seconds(start: datetime | None, end: datetime | None) -> float | None:
    return None if start is None or end is None else round((end - start).total_seconds(), 3)


def sla_of(order: WorkOrder, *, now: datetime | None = None) -> Sla:
    """The SLA of one work order, measured from its first dead letter (from its opening for one
    opened by hand): dead letter -> opened (the notice), -> acknowledged, -> compensated. A step
    not taken yet is measured to `now`, so a work order nobody acknowledges breaches while it waits."""
    now = now or timezone.now()
    start = order.first_dead_at or order.created_at
    live = order.state in WORK_ORDER_LIVE
    acknowledged = order.acknowledged_at or (now if live else None)
    compensated = order.compensated_at or (now if live else None)
    took = {"notice": _seconds(start, order.created_at), "acknowledge": _seconds(start, acknowledged),
            "compensate": _seconds(start, compensated)}
    breached = tuple(clock for clock, limit in sla_limits().items()
                     if took[clock] is not None and took[clock] > limit)
    return Sla(took["notice"], took["acknowledge"], took["compensate"], breached)


def sla_limits() -> dict[str, int]:
    """Each SLA clock's limit in seconds, in the order the clocks stop."""
    return {"notice": settings.RETRYOPS_SLA_NOTICE_SECONDS,
            "acknowledge": settings.RETRYOPS_SLA_ACKNOWLEDGE_SECONDS,
            "compensate": settings.RETRYOPS_SLA_COMPENSATE_SECONDS}


@dataclass(frozen=True)
class SlaClock:
    """One SLA clock of a work order as an operator reads it: from its first dead letter (its
    opening, for one opened by hand) to the step the clock is named after."""

    name: str
    started_at: datetime
    # When the step was taken; None while the clock runs, or when the work order ended without it.
    stopped_at: datetime | None
    # Until the step, or until now while it runs; None when the work order ended without the step.
    seconds: float | None
    limit: int
    # Past its limit: now, or when it stopped.
    breached: bool
    # When it ran out, as compensation.services.escalation marked it (and paged the on-call).
    marked_at: datetime | None

    @property
    def running(self) -> bool:
        return self.stopped_at is None and self.seconds is not None


def sla_clocks(order: WorkOrder, *, now: datetime | None = None) -> list[SlaClock]:
    """The three clocks of sla_of (notice: dead letter -> opened; acknowledge; compensate), each
    with its limit and the breach escalation marked, for the work order's page."""
    sla = sla_of(order, now=now)
    stops = {"notice": order.created_at, "acknowledge": order.acknowledged_at, "compensate": order.compensated_at}
    return [SlaClock(name=name, started_at=order.first_dead_at or order.created_at, stopped_at=stops[name],
                     seconds=getattr(sla, f"{name}_seconds"), limit=limit, breached=name in sla.breached,
                     marked_at=getattr(order, f"{name}_breached_at"))
            for name, limit in sla_limits().items()]


def dead_letter_states_of(order: WorkOrder) -> dict[str, int]:
    """How many of a work order's dead letters are in each state: one GROUP BY on its foreign key."""
    return dict(DeadLetter.objects.filter(work_order=order).order_by().values_list("state").annotate(Count("id")))


def notifications_of(order: WorkOrder, *, limit: int) -> list[Notification]:
    """What the on-call was told about a work order, newest first (notification_subject_idx)."""
    return list(Notification.objects.filter(subject_id=order.pk).order_by("-id")[:limit])


def runbook_runs_of(order: WorkOrder, *, limit: int) -> list[RunbookRun]:
    """A work order's runbook runs, newest first."""
    return list(order.runbook_runs.order_by("-id")[:limit])


def live_work_orders() -> QuerySet[WorkOrder]:
    """The work orders someone still has to act on, oldest first (work_order_live_idx)."""
    return WorkOrder.objects.filter(state__in=WORK_ORDER_LIVE).select_related("pool").order_by("created_at")


def unacknowledged_past(*, now: datetime | None = None) -> QuerySet[WorkOrder]:
    """Open work orders whose acknowledge clock has run out."""
    limit = (now or timezone.now()) - timedelta(seconds=settings.RETRYOPS_SLA_ACKNOWLEDGE_SECONDS)
    return WorkOrder.objects.filter(state=WorkOrderState.OPEN, first_dead_at__lt=limit)


def dead_letters_by_signature(*, states=(DeadLetterState.OPEN, DeadLetterState.REPLAYING),
                              limit: int | None = None) -> list[dict]:
    """The DLQ by flow and error signature, biggest group first: how many in `states`, the oldest
    and newest death, and the ids of the work orders they are on (usually one: the live work order
    of that flow and signature). One GROUP BY flow, signature and work order, which PostgreSQL
    hashes (an aggregate of the distinct work orders would sort every row: four times slower at
    100,000); its few rows per group are folded here."""
    rows = (DeadLetter.objects.filter(state__in=states).order_by().values("flow", "error_signature", "work_order_id")
            .annotate(count=Count("id"), oldest=Min("died_at"), newest=Max("died_at")))
    groups: dict[tuple[str, str], dict] = {}
    for row in rows:
        group = groups.setdefault((row["flow"], row["error_signature"]), {
            "flow": row["flow"], "error_signature": row["error_signature"], "count": 0, "oldest": row["oldest"],
            "newest": row["newest"], "work_orders": []})
        group["count"] += row["count"]
        group["oldest"], group["newest"] = min(group["oldest"], row["oldest"]), max(group["newest"], row["newest"])
        if row["work_order_id"] is not None:
            group["work_orders"].append(row["work_order_id"])
    ordered = sorted(groups.values(), key=lambda g: (-g["count"], g["flow"], g["error_signature"]))
    for group in ordered:
        group["work_orders"].sort()
    return ordered if limit is None else ordered[:limit]


def open_dead_letter_groups(*, limit: int) -> list[dict]:
    """The open dead letters by flow and error signature (dead_letters_by_signature), the biggest
    `limit` groups, each with its work orders as rows: two queries whatever the number of groups."""
    groups = dead_letters_by_signature(states=(DeadLetterState.OPEN,), limit=limit)
    orders = WorkOrder.objects.in_bulk({pk for group in groups for pk in group["work_orders"]})
    for group in groups:
        group["work_orders"] = [orders[pk] for pk in group["work_orders"] if pk in orders]
    return groups


def _queues() -> dict:
    """Each RQ queue's waiting, scheduled and running jobs; `error` when Redis does not answer."""
    import django_rq
    from redis.exceptions import RedisError
    from rq.registry import ScheduledJobRegistry, StartedJobRegistry

    from scheduling.queueing import FLOW_QUEUE, PERIODIC_QUEUE, RETRY_QUEUE

    queues = {}
    for name in (RETRY_QUEUE, FLOW_QUEUE, "default", PERIODIC_QUEUE):
        try:
            queue = django_rq.get_queue(name)
            queues[name] = {"waiting": queue.count,
                            "scheduled": ScheduledJobRegistry(queue=queue).count,
                            "running": StartedJobRegistry(queue=queue).count}
        except RedisError as exc:
            queues[name] = {"error": f"Redis did not answer: {exc}"}
    return queues


def retry_overview(*, now: datetime | None = None, limit: int = 50) -> dict:
    """One screen for retry_inspect: the RQ queues, the tasks waiting for a retry (and the next
    one due), running attempts, the DLQ by flow and signature, and the live work orders with their
    SLA. JSON-ready (times as ISO text)."""
    from scheduling.choices import AttemptOutcome, TaskState
    from scheduling.models import Attempt, Task

    now = now or timezone.now()
    retrying = Task.objects.filter(state=TaskState.RETRYING)
    next_due = retrying.order_by("next_run_at").values_list("next_run_at", flat=True).first()
    orders = []
    for order in live_work_orders()[:limit]:
        sla = sla_of(order, now=now)
        orders.append({"id": order.pk, "title": order.title, "state": order.state, "assignee": order.assignee,
                       "dead_letters": order.dead_letter_count, "sla": sla.state,
                       "waiting_seconds": sla.acknowledge_seconds if order.state == WorkOrderState.OPEN
                       else sla.compensate_seconds})
    return {
        "at": now.isoformat(),
        "queues": _queues(),
        "scheduled_retries": {"count": retrying.count(), "next_due": next_due.isoformat() if next_due else None},
        "running_attempts": Attempt.objects.filter(outcome=AttemptOutcome.RUNNING).count(),
        "dead_letters": [{**row, "oldest": row["oldest"].isoformat(), "newest": row["newest"].isoformat()}
                         for row in dead_letters_by_signature()[:limit]],
        "work_orders": orders,
    }
