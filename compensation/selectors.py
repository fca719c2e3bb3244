"""Reads of dead letters and work orders shared by the admin, the commands and the API. No writes."""

import functools
from dataclasses import dataclass
from datetime import datetime, timedelta
from operator import or_

from django.conf import settings
from django.db.models import (
    Count,
    DateTimeField,
    ExpressionWrapper,
    F,
    Max,
    Min,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
)
from django.utils import timezone
from django.utils.translation import gettext

from compensation.choices import (
    WORK_ORDER_LIVE,
    DeadLetterState,
    WorkOrderSource,
    WorkOrderState,
)
from compensation.models import BulkReplay, DeadLetter
from compensation.notifications.models import (
    Notification,
    NotificationEvent,
    NotificationState,
    NotificationSubject,
)
from compensation.runbooks.models import RunbookRun
from compensation.work_orders.models import SLA_CLOCKS, SLA_START, WorkOrder
from retryops.errors import BadInput, NotFound
from retryops.inputs import record_id


def _seconds(start: datetime | None, end: datetime | None) -> float | None:
    return None if start is None or end is None else round((end - start).total_seconds(), 3)


def sla_limits() -> dict[str, int]:
    """Each SLA clock's limit in seconds, in the order the clocks stop."""
    return {clock: getattr(settings, f"RETRYOPS_SLA_{clock.upper()}_SECONDS") for clock in SLA_CLOCKS}


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
    """A work order's clocks, measured from its first dead letter (from its opening for one opened
    by hand): notice (-> opened), acknowledge, compensate. A step not taken yet on a live work
    order is measured to `now`, so a work order nobody acknowledges breaches while it waits."""
    now = now or timezone.now()
    start = order.first_dead_at or order.created_at
    live = order.state in WORK_ORDER_LIVE
    stops = {"notice": order.created_at, "acknowledge": order.acknowledged_at, "compensate": order.compensated_at}
    clocks = []
    for name, limit in sla_limits().items():
        seconds = _seconds(start, stops[name] or (now if live else None))
        clocks.append(SlaClock(name=name, started_at=start, stopped_at=stops[name], seconds=seconds, limit=limit,
                               breached=seconds is not None and seconds > limit,
                               marked_at=getattr(order, f"{name}_breached_at")))
    return clocks


def dead_letter_states_of(order: WorkOrder) -> dict[str, int]:
    """How many of a work order's dead letters are in each state: one GROUP BY on its foreign key."""
    return dict(DeadLetter.objects.filter(work_order=order).order_by().values_list("state").annotate(Count("id")))


def notifications_of(order: WorkOrder, *, limit: int) -> list[Notification]:
    """What the on-call was told about a work order, newest first (notification_subject_idx)."""
    return list(Notification.objects.filter(subject_type=NotificationSubject.WORK_ORDER, subject_id=order.pk)
                .order_by("-id")[:limit])


def runbook_runs_of(order: WorkOrder, *, limit: int) -> list[RunbookRun]:
    """A work order's runbook runs, newest first."""
    return list(order.runbook_runs.order_by("-id")[:limit])


def live_work_orders() -> QuerySet[WorkOrder]:
    """The work orders someone still has to act on, oldest first (work_order_live_idx)."""
    return WorkOrder.objects.filter(state__in=WORK_ORDER_LIVE).select_related("pool").order_by("created_at")


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


def retry_overview(*, now: datetime | None = None, limit: int = 50) -> dict:
    """One screen for retry_inspect: the RQ queues, the tasks waiting for a retry (and the next
    one due), running attempts, the DLQ by flow and signature, and the live work orders with their
    SLA. JSON-ready (times as ISO text)."""
    from scheduling.selectors import running_attempts, scheduled_retries

    now = now or timezone.now()
    retries = scheduled_retries(now=now)
    orders = []
    for order in live_work_orders()[:limit]:
        clocks = {clock.name: clock for clock in sla_clocks(order, now=now)}
        breached = [name for name, clock in clocks.items() if clock.breached]
        waiting = clocks["acknowledge" if order.state == WorkOrderState.OPEN else "compensate"]
        orders.append({"id": order.pk, "title": order.title, "state": order.state, "assignee": order.assignee,
                       "dead_letters": order.dead_letter_count, "waiting_seconds": waiting.seconds,
                       "sla": "breached: " + ", ".join(breached) if breached else "ok"})
    return {
        "at": now.isoformat(),
        "queues": {queue.pop("name"): queue for queue in rq_health(now=now)["queues"]},
        "scheduled_retries": {"count": retries["count"],
                              "next_due": retries["next_due"].isoformat() if retries["next_due"] else None},
        "running_attempts": running_attempts()["count"],
        "dead_letters": [{**row, "oldest": row["oldest"].isoformat(), "newest": row["newest"].isoformat()}
                         for row in dead_letters_by_signature()[:limit]],
        "work_orders": orders,
    }


def breached_clocks(order: WorkOrder, *, now: datetime | None = None) -> tuple[str, ...]:
    """The SLA clocks a work order is past: those escalation marked (a mark stays after the work
    order moved on), then those past their limit now."""
    marked = [clock for clock in SLA_CLOCKS if getattr(order, f"{clock}_breached_at") is not None]
    return tuple(dict.fromkeys([*marked, *(clock.name for clock in sla_clocks(order, now=now) if clock.breached)]))


def _past_sla(now: datetime) -> dict[str, Q]:
    """Per clock, breached_clocks as a condition on live work orders annotated with `sla_start`
    (a live work order has no compensated_at, and a step not taken yet runs to `now`)."""
    notice, acknowledge, compensate = (timedelta(seconds=limit) for limit in sla_limits().values())
    return {
        "notice": Q(notice_breached_at__isnull=False) | Q(created_at__gt=F("sla_start") + notice),
        "acknowledge": Q(acknowledge_breached_at__isnull=False) | Q(acknowledged_at__gt=F("sla_start") + acknowledge)
        | Q(acknowledged_at__isnull=True, sla_start__lt=now - acknowledge),
        "compensate": Q(compensate_breached_at__isnull=False) | Q(sla_start__lt=now - compensate),
    }


def live_work_order_board(*, now: datetime | None = None, limit: int = 5) -> dict:
    """The live work orders at a glance: how many in each state, how many past each SLA clock and
    past any (as the work orders' SLA column shows them), and the `limit` past their SLA the
    longest, each with its clocks. Two queries on work_order_live_idx, however many there are."""
    now = now or timezone.now()
    past = _past_sla(now)
    past_any = functools.reduce(or_, past.values())
    live = WorkOrder.objects.filter(state__in=WORK_ORDER_LIVE).annotate(sla_start=SLA_START)
    counts = live.aggregate(
        **{state: Count("pk", filter=Q(state=state)) for state in WORK_ORDER_LIVE},
        **{f"past_{clock}": Count("pk", filter=condition) for clock, condition in past.items()},
        past_any=Count("pk", filter=past_any))
    worst = live.filter(past_any).order_by("sla_start", "id")[:limit]
    return {
        "live": sum(counts[state] for state in WORK_ORDER_LIVE),
        "by_state": {state: counts[state] for state in WORK_ORDER_LIVE},
        "past_sla": counts["past_any"],
        "past_by_clock": {clock: counts[f"past_{clock}"] for clock in SLA_CLOCKS},
        "worst": [(order, breached_clocks(order, now=now)) for order in worst],
    }


# The acceptance figures' work orders (telemetry.figures.selectors reads them through these, and the
# work order list's filters select the same rows, so a figure's link shows what it counted).

def first_page_sent():
    """When the first trigger page about a work order (OuterRef "pk") reached a channel: the
    moment the on-call was notified, which the notice SLA clock stops at too
    (notification_subject_idx; an alert's page may carry the same id)."""
    return (Notification.objects.filter(subject_type=NotificationSubject.WORK_ORDER, subject_id=OuterRef("pk"),
                                        event=NotificationEvent.TRIGGER, state=NotificationState.SENT)
            .order_by("sent_at").values("sent_at")[:1])


def escalated_work_orders(*, since: datetime, until: datetime) -> QuerySet[WorkOrder]:
    """Work orders opened by dead letters whose first dead letter died between `since` and `until`
    (both included), annotated with `paged_at` (None: nobody has been paged about it yet)."""
    return (WorkOrder.objects.filter(source=WorkOrderSource.DEAD_LETTERS, first_dead_at__gte=since,
                                     first_dead_at__lte=until)
            .annotate(paged_at=Subquery(first_page_sent())))


def compensated_work_orders(*, since: datetime, until: datetime) -> QuerySet[WorkOrder]:
    """Work orders compensated between `since` and `until` (both included)."""
    return WorkOrder.objects.filter(state=WorkOrderState.COMPENSATED, compensated_at__gte=since,
                                    compensated_at__lte=until)


def compensate_due():
    """When a work order's compensate SLA clock runs out: its start plus RETRYOPS_SLA_COMPENSATE_SECONDS."""
    return ExpressionWrapper(SLA_START + timedelta(seconds=sla_limits()["compensate"]), output_field=DateTimeField())


def work_orders_due(*, since: datetime, until: datetime) -> QuerySet[WorkOrder]:
    """Work orders whose compensate SLA ran out between `since` and `until` (both included), but the
    cancelled ones (opened by mistake, nothing to compensate), annotated with `compensate_due`."""
    return (WorkOrder.objects.exclude(state=WorkOrderState.CANCELLED).annotate(compensate_due=compensate_due())
            .filter(compensate_due__gte=since, compensate_due__lte=until))


def completed_by_due() -> Q:
    """A work order (annotated with `compensate_due`) compensated or closed before its compensate SLA ran out."""
    return Q(state__in=[WorkOrderState.COMPENSATED, WorkOrderState.CLOSED], ended_at__lte=F("compensate_due"))


def dead_letter_queue_by_flow() -> list[dict]:
    """The dead-letter queue's length by flow: open and replaying dead letters of each flow and
    the oldest death among them, longest queue first. One GROUP BY over the open and replaying
    rows of dead_letter_state_age_idx."""
    return list(DeadLetter.objects.filter(state__in=(DeadLetterState.OPEN, DeadLetterState.REPLAYING))
                .values("flow").annotate(open=Count("pk", filter=Q(state=DeadLetterState.OPEN)),
                                         replaying=Count("pk", filter=Q(state=DeadLetterState.REPLAYING)),
                                         oldest=Min("died_at"))
                .order_by("-open", "-replaying", "flow"))


def rq_health(*, now: datetime | None = None, timeout: float = 2.0) -> dict:
    """The RQ queues and workers at a glance (django-rq's dashboard at /admin/rq/ has the rest):
    each queue's waiting, scheduled, running and failed jobs and how many workers listen to it;
    each worker's state, queues and last heartbeat, `late` when that is older than RQ's worker
    TTL (a worker heartbeats at least that often, even idle, so it is likely dead; RQ drops it a
    minute later). `error` instead, per Redis, when it does not answer within `timeout` seconds."""
    import django_rq
    from redis.exceptions import RedisError
    from rq import Worker
    from rq.defaults import DEFAULT_WORKER_TTL
    from rq.registry import FailedJobRegistry, ScheduledJobRegistry, StartedJobRegistry

    from retryops.probes import queue_server, redis_client
    from scheduling.queueing import WORKER_QUEUES

    now = now or timezone.now()
    names = WORKER_QUEUES
    servers = {name: queue_server(name) for name in names}
    workers, errors = {}, {}
    for server in dict.fromkeys(servers.values()):
        try:
            for worker in Worker.all(connection=redis_client(server, timeout)):
                age = (now - worker.last_heartbeat).total_seconds() if worker.last_heartbeat else None
                workers[worker.name] = {"name": worker.name, "state": worker.get_state(),
                                        "queues": worker.queue_names(), "last_heartbeat": worker.last_heartbeat,
                                        "heartbeat_age": age, "late": age is None or age > DEFAULT_WORKER_TTL}
        except RedisError as exc:
            errors[server] = gettext("Redis did not answer: %(error)s") % {"error": exc}
    queues = []
    for name in names:
        row = {"name": name, "workers": sum(name in worker["queues"] for worker in workers.values())}
        if servers[name] in errors:
            queues.append({**row, "error": errors[servers[name]]})
            continue
        try:
            queue = django_rq.get_queue(name, connection=redis_client(servers[name], timeout))
            # Counted without the registries' clean-up, which moves and fails jobs: a page only reads.
            registries = {"scheduled": ScheduledJobRegistry, "running": StartedJobRegistry,
                          "failed": FailedJobRegistry}
            queues.append({**row, "waiting": queue.count, **{
                what: registry(queue=queue).get_job_count(cleanup=False) for what, registry in registries.items()}})
        except RedisError as exc:
            queues.append({**row, "error": gettext("Redis did not answer: %(error)s") % {"error": exc}})
    return {"queues": queues, "workers": sorted(workers.values(), key=lambda worker: worker["name"]),
            "errors": list(errors.values())}


# One row by id, for the API's pages: NotFound (404) naming what is missing.


def _get(queryset: QuerySet, row, *, kind: str):
    row_id = row.pk if hasattr(row, "pk") else record_id(row, field=kind, error=BadInput)
    found = queryset.filter(pk=row_id).first()
    if found is None:
        raise NotFound(f"no {kind.replace('_', ' ')} with id {row_id}", kind=kind, id=row_id)
    return found


def get_dead_letter(dead_letter: DeadLetter | int) -> DeadLetter:
    """A dead letter with its task (whose payload a replay runs again), pool and resource."""
    return _get(DeadLetter.objects.select_related("task", "pool", "resource"), dead_letter, kind="dead_letter")


def get_bulk_replay(bulk_replay: BulkReplay | int) -> BulkReplay:
    """A bulk replay and its progress."""
    return _get(BulkReplay.objects.all(), bulk_replay, kind="bulk_replay")


def get_runbook_run(run: RunbookRun | int) -> RunbookRun:
    """A runbook run and its outcome."""
    return _get(RunbookRun.objects.all(), run, kind="runbook_run")


def get_work_order(work_order: WorkOrder | int) -> WorkOrder:
    """A work order with its pool."""
    return _get(WorkOrder.objects.select_related("pool"), work_order, kind="work_order")


def work_order_detail(work_order: WorkOrder | int, *, now: datetime | None = None) -> WorkOrder:
    """A work order with what its page shows beside its fields: `sla_clocks` (sla_clocks) and
    `dead_letter_states` (dead_letter_states_of)."""
    order = get_work_order(work_order)
    order.sla_clocks = sla_clocks(order, now=now)
    order.dead_letter_states = dead_letter_states_of(order)
    return order


def runbook_runs_for(work_order: WorkOrder | int) -> QuerySet[RunbookRun]:
    """A work order's runbook runs (newest first once paginated); NotFound when there is no such work order."""
    return RunbookRun.objects.filter(work_order=get_work_order(work_order))
