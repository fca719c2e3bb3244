"""Reads of tasks shared by the services, the console, the API and telemetry. No writes here."""

import heapq
import itertools
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db.models import (
    BigIntegerField,
    Count,
    DateTimeField,
    Exists,
    ExpressionWrapper,
    F,
    Min,
    OuterRef,
    Prefetch,
    Q,
    QuerySet,
    Subquery,
    prefetch_related_objects,
)
from django.db.models.functions import Coalesce, TruncHour
from django.utils import timezone
from django.utils.translation import gettext as _

from resources.choices import EventKind
from resources.classification import compile_patterns, matches
from resources.models import Resource, ResourceEvent
from resources.selectors import get_resource, newest_first_of, recently_failed
from resources.signatures import text_signature
from retryops.errors import BadInput, NotFound
from retryops.inputs import record_id, whole_number
from retryops.jsonsafe import check_text
from retryops.replica import read_alias
from scheduling.choices import (
    TERMINAL_STATES,
    WAITING_STATES,
    AttemptOutcome,
    TaskEventKind,
    TaskState,
)
from scheduling.errors import UnknownPolicy
from scheduling.models import (
    Attempt,
    AttemptRollupMark,
    BatchConfig,
    RetryPolicy,
    RetryRollup,
    Task,
    TaskEvent,
)
from scheduling.watermark import hour_floor, snapshot

# The retry policy of a task that names none (config/tasks/retry-policies.yaml defines it).
DEFAULT_POLICY = "default"


def _resource_id(resource: Resource | int) -> int:
    return resource.pk if isinstance(resource, Resource) else record_id(resource, field="resource", error=BadInput)


def get_policy(policy: RetryPolicy | str | None) -> RetryPolicy:
    """A retry policy by name (DEFAULT_POLICY when None), or the policy itself."""
    if isinstance(policy, RetryPolicy):
        return policy
    name = policy or DEFAULT_POLICY
    if not isinstance(name, str) or check_text(name):
        raise BadInput(_("policy must be a policy's name, got %(value)r") % {"value": name}, field="policy")
    try:
        return RetryPolicy.objects.get(name=name)
    except RetryPolicy.DoesNotExist:
        raise UnknownPolicy(_("no retry policy %(name)r; load them with manage.py load_retry_policies") % {
            "name": name}, policy=name) from None


def tasks_of_resource(resource: Resource | int) -> QuerySet[Task]:
    """Every task that ran on, asked for, or waits for the resource; newest first."""
    resource_id = _resource_id(resource)
    ran = Task.objects.filter(attempts__resource_id=resource_id).values("pk")
    return Task.objects.filter(
        Q(pk__in=ran) | Q(requested_resource_id=resource_id) | Q(pinned_resource_id=resource_id)
    ).order_by("-id")


def last_task_on(resource: Resource | int) -> Task | None:
    """The task whose attempt ran on the resource last: whose flow, payload and policy an operator
    retry or a probation probe repeats. By the attempt (attempt_resource_history_idx), not by the
    task: an older task's retry often runs on a resource after newer tasks have."""
    attempt = newest_first_of(Attempt.objects, resource_id=_resource_id(resource)).select_related("task").first()
    return attempt.task if attempt else None


def live_task_on(resource: Resource | int) -> Task | None:
    """A task that has not finished and will touch the resource again, so that starting another
    task on it would run the same business instance twice: its attempt runs there now (also a
    lost attempt not yet recovered: task.resource is the running attempt's), it waits for its
    next attempt there (pinned, or holding a lease on it), or it is strict about it. A waiting
    task that ran there and moved on to another resource (not strict, or retried elsewhere) is
    not bound any more. An operator's question, asked once per retry: no index beyond the
    state's."""
    resource_id = _resource_id(resource)
    bound = (
        Q(state=TaskState.RUNNING, resource_id=resource_id)
        | Q(state__in=WAITING_STATES, pinned_resource_id=resource_id)
        | Q(state__in=WAITING_STATES, held_lease_token__isnull=False, resource_id=resource_id)
        | Q(strict=True, requested_resource_id=resource_id)
    )
    return Task.objects.exclude(state__in=TERMINAL_STATES).filter(bound).order_by("-id").first()


def waiting_pinned_to(resource) -> QuerySet[Task]:
    """Waiting tasks whose next attempt is meant to run on the resource (an id, an instance or an
    OuterRef); served by task_waiting_pinned_idx."""
    return Task.objects.filter(state__in=WAITING_STATES, pinned_resource=resource)


def lost_attempts() -> list[Attempt]:
    """Running attempts whose lease is gone (swept, or their resource moved on): their worker
    died or hung. What recover_lost_attempts abandons."""
    running = Attempt.objects.filter(outcome=AttemptOutcome.RUNNING, task__state=TaskState.RUNNING).select_related(
        "resource")
    return [a for a in running if a.resource is None or a.resource.lease_token != a.lease_token]


def failed_first_candidates(*, config: BatchConfig, now: datetime) -> list[Resource]:
    """What a failed-first batch tick tries first: the pool's recently failed, retryable resources,
    newest failure first, whose last failure matches the config's patterns (any, when it has
    none); up to a few times what a tick needs, so that those taken meanwhile can be skipped. A
    resource a waiting task is pinned to (its retry is meant to run there, after a swept hold or
    a lost worker) is not a candidate."""
    wanted = config.tasks_per_tick * 5
    recent = recently_failed(pool=config.pool_id, since=now - timedelta(seconds=config.recent_window_seconds)).exclude(
        Exists(waiting_pinned_to(OuterRef("pk"))))
    patterns = compile_patterns(tuple(config.retryable_error_patterns or ()))
    if not patterns:
        return list(recent[:wanted])
    # The admin probed the patterns; the window bounds the scan, matches() each search.
    matching = []
    for resource in recent.iterator(chunk_size=500):
        if any(matches(p, resource.last_failure_reason) for p in patterns):
            matching.append(resource)
            if len(matching) >= wanted:
                break
    return matching


def get_task(task: Task | int) -> Task:
    """A task by id with its pool and policy loaded (the console's pages show both)."""
    task_id = task.pk if isinstance(task, Task) else record_id(task, field="task", error=BadInput)
    found = Task.objects.select_related("pool", "policy").filter(pk=task_id).first()
    if found is None:
        raise NotFound(_("no task with id %(id)s") % {"id": task_id}, code="task_not_found", task_id=task_id)
    return found


def get_task_with_attempts(task: Task | int) -> Task:
    """get_task with its attempts loaded, in order, each with its resource: a task's page in the API."""
    found = get_task(task)
    prefetch_related_objects([found], Prefetch("attempts", queryset=Attempt.objects.select_related("resource")
                                               .order_by("number")))
    return found


def changed_since(tasks: QuerySet[Task], since: datetime) -> QuerySet[Task]:
    """The tasks of `tasks` that changed at `since` or later: created or finished then, or an
    attempt of theirs started or ended, or one of their events was written (a retry scheduled,
    run now, cancelled, dead). A task row keeps no time of its last change; the rows written with
    each change do (attempt_number_unique_per_task and the events' task index find them)."""
    attempts = Attempt.objects.filter(Q(started_at__gte=since) | Q(finished_at__gte=since), task_id=OuterRef("pk"))
    events = TaskEvent.objects.filter(task_id=OuterRef("pk"), created_at__gte=since)
    return tasks.filter(Q(created_at__gte=since) | Q(finished_at__gte=since) | Exists(attempts) | Exists(events))


def attempts_on(resource: Resource | int, *, limit: int = 20) -> list[Attempt]:
    """A resource's latest attempts with their tasks, newest first: one query on
    attempt_resource_history_idx, whatever the resource's history."""
    limit = whole_number(limit, field="limit", error=BadInput)
    attempts = Attempt.objects.filter(resource_id=_resource_id(resource)).select_related("task")
    return list(attempts.order_by("-id")[:limit])


def resource_keys(*, pool: int, prefix: str, limit: int = 20) -> list[str]:
    """Keys of a pool's resources that start with `prefix`, in key order: the console's key
    autocomplete. Walks resource_key_unique_in_pool (pool, key) in order and stops at `limit`."""
    pool = record_id(pool, field="pool", error=BadInput)
    limit = whole_number(limit, field="limit", error=BadInput)
    if not isinstance(prefix, str) or check_text(prefix):
        raise BadInput(_("prefix must be text a column can hold, got %(value)r") % {"value": prefix},
                       field="prefix")
    return list(Resource.objects.filter(pool_id=pool, key__startswith=prefix).order_by("key")
                .values_list("key", flat=True)[:limit])


# How a retry (a task's second or later attempt) ended, by the event its ending wrote: it
# succeeded, it failed and another retry was scheduled, or it failed and the task died. Every
# finished retry writes exactly one of them, so they add up to the retries finished.
RETRY_OUTCOMES = {
    TaskEventKind.RETRY_SUCCEEDED: "succeeded",
    TaskEventKind.RETRY_SCHEDULED: "failed",
    TaskEventKind.DEAD: "dead",
}


# The rows the retry figures count, as SQL (RetryRollup's pass adds them up by hour):
# the events that end a retry, each with its xid (task_event_retry_outcome_idx holds them, with their
# time; task_event_kind_xid_idx by their transaction), and the retries' attempts, each with whether
# it started late (started_late()) and the transaction that finished it.
RETRY_ENDS_SQL = f"""
    SELECT created_at, xid, (kind = '{TaskEventKind.RETRY_SUCCEEDED}')::int AS succeeded,
           (kind = '{TaskEventKind.RETRY_SCHEDULED}')::int AS failed, (kind = '{TaskEventKind.DEAD}')::int AS dead
    FROM {TaskEvent._meta.db_table}
    WHERE kind IN ('{TaskEventKind.RETRY_SUCCEEDED}', '{TaskEventKind.RETRY_SCHEDULED}', '{TaskEventKind.DEAD}')
      AND attempt_number > 1
"""
RETRY_STARTS_SQL = f"""
    SELECT scheduled_for, finished_xid, outcome, started_at > scheduled_for + make_interval(secs => %(grace)s) AS late
    FROM {Attempt._meta.db_table} WHERE number > 1
"""
_ROLLED_UP_ENDS_SQL = f"""
    SELECT coalesce(sum(succeeded), 0)::int, coalesce(sum(failed), 0)::int, coalesce(sum(dead), 0)::int FROM (
        SELECT succeeded, failed, dead FROM {RetryRollup._meta.db_table} WHERE period_start >= %(a)s AND period_start < %(b)s
      UNION ALL
        SELECT succeeded, failed, dead FROM ({RETRY_ENDS_SQL}) e WHERE created_at >= %(since)s AND created_at < %(a)s
      UNION ALL
        SELECT succeeded, failed, dead FROM ({RETRY_ENDS_SQL}) e WHERE created_at >= %(b)s AND created_at <= %(until)s
      UNION ALL
        SELECT succeeded, failed, dead FROM ({RETRY_ENDS_SQL}) e
        WHERE xid >= %(mark)s::xid8 AND created_at >= %(a)s AND created_at < %(b)s
    ) ended
"""
_ROLLED_UP_STARTS_SQL = f"""
    SELECT coalesce(sum(started), 0)::int, coalesce(sum(late), 0)::int FROM (
        SELECT started, late FROM {RetryRollup._meta.db_table} WHERE period_start >= %(a)s AND period_start < %(b)s
      UNION ALL
        SELECT 1, late::int FROM ({RETRY_STARTS_SQL}) s WHERE scheduled_for >= %(since)s AND scheduled_for < %(a)s
      UNION ALL
        SELECT 1, late::int FROM ({RETRY_STARTS_SQL}) s WHERE scheduled_for >= %(b)s AND scheduled_for <= %(until)s
      UNION ALL
        SELECT 1, late::int FROM ({RETRY_STARTS_SQL}) s
        WHERE finished_xid >= %(mark)s::xid8 AND scheduled_for >= %(a)s AND scheduled_for < %(b)s
      UNION ALL
        SELECT 1, late::int FROM ({RETRY_STARTS_SQL}) s
        WHERE outcome = '{AttemptOutcome.RUNNING}' AND scheduled_for >= %(a)s AND scheduled_for < %(b)s
    ) started
"""


def retry_sql_params(**params) -> dict:
    """The parameters of the retry rows' SQL, with `params`."""
    return {"grace": float(settings.RETRYOPS_RETRY_SLA_GRACE_SECONDS), **params}


def _retry_plan(cursor, *, since: datetime, until: datetime, late: bool = False) -> dict | None:
    """Where a window's whole hours that RetryRollup holds begin (`a`) and end (`b`), with the
    rollup's mark; None when it holds none of them (no pass yet, a short window, or, for `late`,
    lateness counted with another grace than the setting's)."""
    cursor.execute(f"SELECT below_xid::text, kept_from, grace_seconds FROM {AttemptRollupMark._meta.db_table} "
                   "WHERE id = 1")
    mark = cursor.fetchone()
    if mark is None or mark[1] is None or (late and mark[2] != settings.RETRYOPS_RETRY_SLA_GRACE_SECONDS):
        return None
    first = hour_floor(since)
    a, b = max(first if first == since else first + timedelta(hours=1), mark[1]), hour_floor(until)
    if a >= b:
        return None
    return {"since": since, "until": until, "a": a, "b": b, "mark": mark[0]}


def _retry_outcome_events(*, since: datetime, until: datetime) -> QuerySet[TaskEvent]:
    # task_event_retry_outcome_idx holds exactly these rows, with the columns the counts need.
    return TaskEvent.objects.filter(kind__in=list(RETRY_OUTCOMES), attempt_number__gt=1, created_at__gte=since,
                                    created_at__lte=until)


def retry_outcomes(*, since: datetime, until: datetime) -> dict[str, int]:
    """How many retries ended between `since` and `until`: {"succeeded", "failed", "dead"}. The
    whole hours from RetryRollup, the rest from the events: the window's cut ends, and the events
    written since the rollup's last pass (task_event_kind_xid_idx); all in one snapshot."""
    with snapshot(read_alias()) as cursor:
        plan = _retry_plan(cursor, since=since, until=until)
        if plan is None:
            counts = dict.fromkeys(RETRY_OUTCOMES.values(), 0)
            rows = _retry_outcome_events(since=since, until=until).values_list("kind").annotate(n=Count("*")).order_by()
            for kind, n in rows.using(read_alias()):
                counts[RETRY_OUTCOMES[kind]] = n
            return counts
        cursor.execute(_ROLLED_UP_ENDS_SQL, retry_sql_params(**plan))
        succeeded, failed, dead = cursor.fetchone()
    return {"succeeded": succeeded, "failed": failed, "dead": dead}


def retry_outcomes_per_hour(*, now: datetime | None = None, hours: int = 24) -> list[dict]:
    """Retry outcomes in each of the last `hours` hours, oldest first, the current (partial) hour
    last: [{"hour": start of the hour, "succeeded", "failed", "dead"}], hours without a retry
    included. One GROUP BY on task_event_retry_outcome_idx. Hours are cut in UTC, which is where
    a local clock cuts them too unless its offset has minutes (they are then labelled at :30 or
    :45), and which never merges or skips an hour when daylight saving time changes."""
    hours = whole_number(hours, field="hours", maximum=24 * 31, error=BadInput)
    now = now or timezone.now()
    last = now.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    first = last - timedelta(hours=hours - 1)
    buckets = {first + timedelta(hours=i): dict.fromkeys(RETRY_OUTCOMES.values(), 0) for i in range(hours)}
    rows = (_retry_outcome_events(since=first, until=now).annotate(hour=TruncHour("created_at", tzinfo=UTC))
            .values_list("hour", "kind").annotate(n=Count("*")).order_by())
    for hour, kind, n in rows:
        buckets[hour.astimezone(UTC)][RETRY_OUTCOMES[kind]] = n
    return [{"hour": hour, **counts} for hour, counts in buckets.items()]


# Whether a retry started within its SLA (the operators' "retry delay within the SLA, 2-minute
# backoff by default"): the policy's backoff is the promise, and an attempt's scheduled_for is the
# due time the backoff gave it, so a retry keeps the promise when it started no later than that
# plus RETRYOPS_RETRY_SLA_GRACE_SECONDS (the dispatcher's tick and a worker's pick-up). Starting
# early cannot happen except by an operator's "run now", which keeps it too. A retry still waiting
# past its due time plus the grace has already missed it, whether or not it ever starts.

def retry_sla_grace() -> timedelta:
    return timedelta(seconds=settings.RETRYOPS_RETRY_SLA_GRACE_SECONDS)


def retry_starts(*, since: datetime, until: datetime) -> QuerySet[Attempt]:
    """Retries (attempts numbered 2 and up) due between `since` and `until` (both included), which
    have started; attempt_retry_due_idx holds exactly these rows and the columns that time them."""
    return Attempt.objects.filter(number__gt=1, scheduled_for__gte=since, scheduled_for__lte=until)


def retry_start_counts(*, since: datetime, until: datetime) -> dict[str, int]:
    """Of the retries due between `since` and `until` (both included) that have started, how many
    ({"started"}) and how many late ({"late"}, started_late). The whole hours from RetryRollup, the
    rest from the attempts: the window's cut ends, the retries finished since the rollup's last
    pass (attempt_finished_xid_idx) and those running (attempt_one_running_per_task); one snapshot."""
    with snapshot(read_alias()) as cursor:
        plan = _retry_plan(cursor, since=since, until=until, late=True)
        if plan is None:
            return retry_starts(since=since, until=until).using(read_alias()).aggregate(
                started=Count("*"), late=Count("started_at", filter=started_late()))
        cursor.execute(_ROLLED_UP_STARTS_SQL, retry_sql_params(**plan))
        started, late = cursor.fetchone()
    return {"started": started, "late": late}


def started_late() -> Q:
    """A retry (an Attempt) that started later than its due time plus the grace."""
    return Q(started_at__gt=ExpressionWrapper(F("scheduled_for") + retry_sla_grace(), output_field=DateTimeField()))


def late_retry_starts(attempts: QuerySet[Attempt], *, late: bool = True) -> QuerySet[Attempt]:
    """The retries of `attempts` that started late (`late`), or within their SLA."""
    return attempts.filter(started_late()) if late else attempts.exclude(started_late())


def overdue_retries(*, since: datetime, until: datetime, now: datetime) -> QuerySet[Task]:
    """Tasks waiting for a retry (they have run before) that was due between `since` and `until`
    and is past its due time plus the grace at `now` without having started (task_waiting_due_idx)."""
    return Task.objects.filter(state__in=WAITING_STATES, attempt_count__gte=1, next_run_at__gte=since,
                               next_run_at__lte=min(until, now - retry_sla_grace()))


def scheduled_retries(*, now: datetime | None = None, overdue_after: timedelta = timedelta(0)) -> dict:
    """Tasks waiting for a retry: how many, how many are overdue (due more than `overdue_after`
    ago and not started: the workers are behind or missing), and when the next one is due. One
    query on task_state_idx."""
    now = now or timezone.now()
    return Task.objects.filter(state=TaskState.RETRYING).aggregate(
        count=Count("*"), overdue=Count("pk", filter=Q(next_run_at__lt=now - overdue_after)),
        next_due=Min("next_run_at"))


def running_attempts() -> dict:
    """Attempts running now, and when the oldest of them started; one query on the partial index
    attempt_one_running_per_task."""
    return Attempt.objects.filter(outcome=AttemptOutcome.RUNNING).aggregate(count=Count("*"),
                                                                          oldest_started_at=Min("started_at"))


def uncollected_dead_tasks(*, before: datetime) -> int:
    """How many tasks that died before `before` have not been collected into dead letters yet
    (the alerts' "a dead task that never became a dead letter"); task_dead_uncollected_idx."""
    return Task.objects.filter(state=TaskState.DEAD, collected_at__isnull=True, finished_at__lt=before).count()


# A resource's retry history: its attempts and its timeline events, newest first.

# The outcome a timeline event stands for, when it stands for one.
EVENT_OUTCOMES = {
    EventKind.RELEASED_SUCCESS: "success", EventKind.RELEASED_FAILURE: "failure",
    EventKind.HELD_FOR_RETRY: "failure", EventKind.LEASE_EXPIRED: "failure",
}


@dataclass(frozen=True)
class HistoryEntry:
    """One line of a resource's retry history: an attempt that ran on it (kind "attempt") or an
    event of its timeline (claimed, released_failure, reset, quarantined, ...)."""

    time: datetime
    kind: str
    outcome: str | None
    error: str
    signature: str
    category: str
    task: int | None
    actor: str
    attempt_id: int | None = None
    attempt_number: int | None = None
    event_id: int | None = None
    finished_at: datetime | None = None
    duration_ms: int | None = None
    details: dict = field(default_factory=dict)


@dataclass(frozen=True)
class HistoryPage:
    """A page of a resource's retry history. `before` is where the next page starts: the attempt id
    and the event id below which it reads (either None: from the newest), or None when nothing
    is left."""

    resource: Resource
    entries: list[HistoryEntry]
    before: tuple[int | None, int | None] | None


# The columns the history shows; rows are read as dicts (a page of 100 model instances would cost
# more than the two queries that read them).
_ATTEMPT_COLUMNS = ("id", "task_id", "number", "started_at", "finished_at", "outcome", "error_class", "error_message",
                    "error_signature", "category", "duration_ms", "worker", "action")
_EVENT_COLUMNS = ("id", "kind", "actor", "reason", "category", "created_at", "details")


def _attempt_entry(attempt: dict) -> HistoryEntry:
    error = f"{attempt['error_class']}: {attempt['error_message']}" if attempt["error_class"] else \
        attempt["error_message"]
    details = {"worker": attempt["worker"], "action": attempt["action"]} if attempt["worker"] or attempt["action"] \
        else {}
    return HistoryEntry(
        time=attempt["started_at"], kind="attempt", outcome=attempt["outcome"], error=error,
        signature=attempt["error_signature"], category=attempt["category"], task=attempt["task_id"],
        actor=f"task {attempt['task_id']}", attempt_id=attempt["id"], attempt_number=attempt["number"],
        finished_at=attempt["finished_at"], duration_ms=attempt["duration_ms"], details=details)


def _event_entry(event: dict) -> HistoryEntry:
    kind, reason, category = event["kind"], event["reason"], event["category"]
    outcome = EVENT_OUTCOMES.get(kind)
    if kind == EventKind.LEASE_EXPIRED and not category:
        outcome = None  # an unused lease swept back: nothing ran, nothing failed
    failed = outcome == "failure"
    return HistoryEntry(
        time=event["created_at"], kind=kind, outcome=outcome, error=reason if failed else "",
        signature=text_signature(reason) if failed and reason else "", category=category,
        task=event["lease_task"], actor=event["actor"], event_id=event["id"],
        details=event["details"] or {})


def _lease_task() -> Coalesce:
    """The task that held a timeline event's lease: the task of the attempts that ran on it
    (attempt_lease_token_idx), else the live task holding it with no attempt yet
    (task_held_lease_unique). Neither: an external client's lease, or none."""
    token, resource = OuterRef("lease_token"), OuterRef("resource_id")
    ran = Attempt.objects.filter(lease_token=token, resource_id=resource).order_by().values("task_id")[:1]
    holds = Task.objects.filter(held_lease_token=token, resource_id=resource).order_by().values("pk")[:1]
    return Coalesce(Subquery(ran), Subquery(holds), output_field=BigIntegerField())


def retry_history(*, resource: Resource | int, before: tuple[int | None, int | None] = (None, None),
                  limit: int = 50) -> HistoryPage:
    """A page of the resource's history, newest first: its attempts and its timeline events merged
    by time, in two index reads of `limit` + 1 rows whatever its length (attempt_resource_history_idx
    and resource_event_timeline_idx, newest id first; an event's task found by its lease). `before`
    continues a page: (attempt id, event id) below which each list is read, None for from the
    newest. Each list is read by id, which is its order in time; a page is exact however many rows
    arrive meanwhile (those come on no page: they are newer than the first)."""
    limit = whole_number(limit, field="limit", maximum=1000, error=BadInput)
    current = resource if isinstance(resource, Resource) else get_resource(resource_id=_resource_id(resource))
    attempt_below, event_below = (record_id(bound, field="cursor", error=BadInput) if bound is not None else None
                                  for bound in before)
    attempts = newest_first_of(Attempt.objects, resource_id=current.pk).values(*_ATTEMPT_COLUMNS)
    events = newest_first_of(ResourceEvent.objects, resource_id=current.pk).values(
        *_EVENT_COLUMNS, lease_task=_lease_task())
    if attempt_below is not None:
        attempts = attempts.filter(id__lt=attempt_below)
    if event_below is not None:
        events = events.filter(id__lt=event_below)
    # Entries are built as the merge takes them: the limit + 1 it needs, not both lists' 2 * limit + 2.
    merged = list(itertools.islice(heapq.merge(
        (_attempt_entry(a) for a in attempts[:limit + 1]), (_event_entry(e) for e in events[:limit + 1]),
        key=lambda e: e.time, reverse=True), limit + 1))
    page = merged[:limit]
    if len(merged) <= limit:
        return HistoryPage(resource=current, entries=page, before=None)
    shown_attempts = [e.attempt_id for e in page if e.attempt_id is not None]
    shown_events = [e.event_id for e in page if e.event_id is not None]
    # A list none of whose rows this page showed starts the next page where this one started it.
    return HistoryPage(resource=current, entries=page, before=(
        min(shown_attempts) if shown_attempts else attempt_below,
        min(shown_events) if shown_events else event_below))
