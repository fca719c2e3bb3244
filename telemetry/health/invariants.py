"""The invariant checker (`manage.py check_invariants`): read-only queries that find rows breaking a
promise the services keep — a lease nobody holds, a resource held twice, counters that disagree
with the timeline, a waiting task nobody will pick, a dead task without its dead letter or work
order, an operator action without its audit row.

Each check is one query over indexes sized by live work (running attempts, waiting tasks, a
recent window of events), so the whole run stays fast on a million attempts (bench/invariants.py;
tests/telemetry/test_invariant_plans.py proves the plans use them); the exception is the one
full scan of the timeline (counters), which runs only when asked for (`deep`). Telemetry is the top
layer: it reads resources, scheduling, compensation and audit, and writes nothing.

Not checked: operator retries' and cancellations' task.start / task.cancel / resource.retry
entries (their targets are tasks and resources, and nothing on the task says an operator made
it). An API claim writes no audit entry (its record is its timeline row); an external holder's
lease is checked for expiry only.
"""

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection
from django.utils import timezone
from redis import Redis
from rq.job import JobStatus

from audit.choices import AuditAction
from audit.models import AuditEntry
from compensation import jobs as compensation_jobs
from compensation.choices import (
    DeadLetterState,
    WorkOrderSource,
    WorkOrderState,
)
from compensation.models import DeadLetter
from compensation.services.cleanup import RETENTION_DAYS
from compensation.services.escalation import orphaned_dead_letters
from compensation.work_orders.models import WorkOrder
from resources.choices import EventKind, LeaseKind, ResourceState
from resources.models import Resource, ResourceEvent, ResourcePool
from scheduling import jobs as scheduling_jobs
from scheduling.choices import WAITING_STATES, AttemptOutcome, TaskEventKind
from scheduling.models import Attempt, Task, TaskEvent

# The window the event-driven checks (dead letters, their audit rows) read back by default; `deep`
# reads back to the dead letters' retention (older settled ones are purged, legitimately).
RECENT = timedelta(days=1)
# Past this many rows a check prints the count and the first ones only.
DEFAULT_LIMIT = 100

_R, _RE, _P = Resource._meta.db_table, ResourceEvent._meta.db_table, ResourcePool._meta.db_table
_T, _A, _TE = Task._meta.db_table, Attempt._meta.db_table, TaskEvent._meta.db_table
_DL, _WO, _AU = DeadLetter._meta.db_table, WorkOrder._meta.db_table, AuditEntry._meta.db_table


@dataclass(frozen=True)
class Violation:
    """One row that breaks an invariant: its ids, and a line an operator can act on."""

    ids: dict
    message: str

    def line(self) -> str:
        return " ".join(f"{k}={v}" for k, v in self.ids.items()) + f": {self.message}"


@dataclass
class CheckResult:
    """What one check found: every violation counted, the first `limit` of them kept."""

    name: str
    count: int = 0
    violations: list[Violation] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {"check": self.name, "count": self.count,
                "violations": [{"ids": v.ids, "message": v.message} for v in self.violations]}


@dataclass(frozen=True)
class Horizons:
    """How late each background job may be before its work counts as not done, from the settings
    of the jobs that do it."""

    now: datetime
    # The lease sweeper runs with the dispatcher: a lease expired longer than two runs is missed.
    sweep_grace: timedelta
    # The dispatcher wakes an overdue task within a run or two; five runs late is lost.
    dispatch_grace: timedelta
    # The dead-letter step collects a dead task within a run or two.
    dead_letter_grace: timedelta
    # The escalation gives an orphaned open dead letter its work order.
    work_order_grace: timedelta
    # Claims and attempt starts commit the lease and its holder's row together; a fresh lease
    # is not judged (the holder's row of a claim made through another path may follow it).
    fresh_lease: timedelta
    since: datetime
    # Where overdue_tasks reads RQ's jobs. None: the flow queue's connection, on which a Redis error
    # reports each overdue task with its status unknown. A caller that brings its own client (the
    # probe's, with a short timeout: telemetry.health.readiness) gets the error raised, to report it itself.
    jobs_redis: "Redis | None" = None

    @classmethod
    def from_settings(cls, *, now: datetime | None = None, deep: bool = False) -> "Horizons":
        now = now or timezone.now()
        dispatch = timedelta(seconds=scheduling_jobs.DISPATCH_EVERY)
        escalate = timedelta(seconds=compensation_jobs.ESCALATE_EVERY)
        back = timedelta(days=RETENTION_DAYS) if deep else RECENT
        return cls(now=now, sweep_grace=2 * dispatch, dispatch_grace=5 * dispatch,
                   dead_letter_grace=2 * escalate + timedelta(seconds=compensation_jobs.DEAD_LETTERS_EVERY),
                   work_order_grace=2 * escalate, fresh_lease=2 * dispatch, since=now - back)


def _in(values) -> str:
    """A list of constants (states, kinds, actions) written into the statement rather than bound:
    the planner matches a partial index's predicate (state IN (...)) only against literals."""
    return "(" + ", ".join("'" + str(v).replace("'", "''") + "'" for v in values) + ")"


_RUNNING = _in([AttemptOutcome.RUNNING])
_IN_USE = _in([ResourceState.IN_USE])
_USE = _in([LeaseKind.USE])


def _rows(sql: str, params: dict) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def lease_holders(h: Horizons) -> list[Violation]:
    """Every in_use resource has a holder: the live task holding its lease (Task.held_lease_token,
    its attempt's while one runs) or the attempt running on it; a lease no task ever had (an API
    claim) is judged by its expiry alone. A reservation, a probe's lease or a hold is taken for a
    task only (an API claim is a use), so one that no task holds is reported even before any attempt
    ran on it. No lease stays expired past the sweeper's grace.
    Reads the in_use resources by resource_in_use_idx; each lease is judged against the held
    leases (task_held_lease_unique) and the running attempts (attempt_one_running_per_task), which
    the planner hashes once rather than probe per lease; only a lease no live task holds looks for the
    task whose attempts ran on it (attempt_lease_token_idx), and that task's row is read only for a
    lease reported (a join would hash the whole task table: 490 ms at 1,000,000 attempts)."""
    rows = _rows(f"""
        WITH leased AS MATERIALIZED (
            SELECT r.id, r.lease_holder, r.lease_kind, r.leased_until, r.leased_at, r.lease_token, p.lease_seconds
            FROM {_R} r JOIN {_P} p ON p.id = r.pool_id WHERE r.state IN {_IN_USE}
        ), judged AS MATERIALIZED (
            -- The sweeper takes a lapsed lease a heartbeat interval (a third of the lease) after it first saw it.
            SELECT l.*, l.leased_until + make_interval(secs => l.lease_seconds / 3.0) < %(expired_before)s AS expired,
                   l.leased_at < %(fresh_before)s AND NOT (
                       -- Only a live task holds a lease (task_finished_holds_nothing).
                       EXISTS (SELECT 1 FROM {_T} t WHERE t.held_lease_token IS NOT NULL
                               AND t.resource_id = l.id AND t.held_lease_token = l.lease_token)
                       OR EXISTS (SELECT 1 FROM {_A} a WHERE a.outcome IN {_RUNNING}
                                  AND a.resource_id = l.id AND a.lease_token = l.lease_token)) AS unheld
            FROM leased l
        ), suspect AS MATERIALIZED (
            SELECT j.*, CASE WHEN j.unheld THEN (
                       SELECT a.task_id FROM {_A} a WHERE a.lease_token = j.lease_token AND a.resource_id = j.id
                       ORDER BY a.id DESC LIMIT 1) END AS task_id
            FROM judged j WHERE j.expired OR j.unheld
        ), reported AS (
            SELECT s.*, s.unheld AND (s.task_id IS NOT NULL OR s.lease_kind NOT IN {_USE}) AS orphaned FROM suspect s
        )
        SELECT s.id, s.lease_holder, s.lease_kind, s.leased_until, s.task_id,
               (SELECT t.state FROM {_T} t WHERE t.id = s.task_id), s.expired, s.orphaned
        FROM reported s WHERE s.expired OR s.orphaned
        ORDER BY s.id""", {"expired_before": h.now - h.sweep_grace, "fresh_before": h.now - h.fresh_lease})
    found = []
    for resource_id, holder, kind, until, task_id, task_state, expired, unheld in rows:
        if unheld and task_id is None:
            found.append(Violation({"resource": resource_id, "task": None},
                                   f"is leased ({kind}) to {holder!r}, a lease only a task takes, and no task holds "
                                   f"it or ran on it"))
        elif unheld:
            found.append(Violation({"resource": resource_id, "task": task_id},
                                   f"is leased ({kind}) to {holder!r}, which ({task_state}) ran on that lease and "
                                   f"neither runs an attempt on it nor holds it"))
        if expired:
            found.append(Violation({"resource": resource_id},
                                   f"lease ({kind}) of {holder!r} expired at {until.isoformat()} and was not "
                                   f"swept (grace {h.sweep_grace.total_seconds():g} s and a third of the lease)"))
    return found


def double_leases(h: Horizons) -> list[Violation]:
    """No resource has two holders at once: the tasks of its running attempts
    (attempt_one_running_per_task, a few rows) and the holder of its current lease name one task.
    The lease is named by the task holding its token (task_held_lease_unique), else by the
    task of an attempt running on it, else by the resource's holder text (an API claim): so two
    tasks running on one token are two holders, and a renamed holder text is none."""
    rows = _rows(f"""
        WITH running AS (
            SELECT a.resource_id, a.lease_token, a.task_id FROM {_A} a
            WHERE a.outcome IN {_RUNNING} AND a.resource_id IS NOT NULL
        ), holders AS (
            SELECT resource_id, 'task ' || task_id AS holder FROM running
            UNION
            SELECT r.id, COALESCE(
                (SELECT 'task ' || t.id FROM {_T} t WHERE t.held_lease_token = r.lease_token),
                (SELECT 'task ' || x.task_id FROM running x WHERE x.resource_id = r.id
                 AND x.lease_token = r.lease_token ORDER BY x.task_id LIMIT 1),
                r.lease_holder)
            FROM {_R} r WHERE r.id IN (SELECT resource_id FROM running) AND r.state IN {_IN_USE}
        )
        SELECT resource_id, array_agg(holder ORDER BY holder) FROM holders
        GROUP BY resource_id HAVING count(*) > 1 ORDER BY resource_id""",
                 {})
    return [Violation({"resource": resource_id, "holders": ",".join(holders)},
                      f"is held by {len(holders)} holders at once")
            for resource_id, holders in rows]


def counters(h: Horizons) -> list[Violation]:
    """Each resource's success and failure counts equal its timeline's: successes are
    released_success events; failures are released_failure, held_for_retry, and lease_expired of
    a used lease. A full scan of the timeline: deep only."""
    failure = f"""kind IN ('{EventKind.RELEASED_FAILURE}', '{EventKind.HELD_FOR_RETRY}')
                  OR (kind = '{EventKind.LEASE_EXPIRED}' AND details->>'used' = 'true')"""
    rows = _rows(f"""
        SELECT r.id, r.success_count, r.failure_count, coalesce(e.successes, 0), coalesce(e.failures, 0)
        FROM {_R} r LEFT JOIN (
            SELECT resource_id, count(*) FILTER (WHERE kind = '{EventKind.RELEASED_SUCCESS}') AS successes,
                   count(*) FILTER (WHERE {failure}) AS failures
            FROM {_RE} GROUP BY resource_id
        ) e ON e.resource_id = r.id
        WHERE r.success_count <> coalesce(e.successes, 0) OR r.failure_count <> coalesce(e.failures, 0)
        ORDER BY r.id""", {})
    return [Violation({"resource": rid},
                      f"counts {s} successes and {f} failures, its timeline {es} and {ef}")
            for rid, s, f, es, ef in rows]


# How long the overdue check waits before it looks again at a job it found stranded: a healthy
# worker marks the job it took started within milliseconds.
STRANDED_SECOND_LOOK = timedelta(seconds=1)


def overdue_tasks(h: Horizons) -> list[Violation]:
    """Every waiting task is due in the future, or has its wake-up waiting on a queue (a backlog the
    workers will reach) or being run by a live worker, or is overdue by less than the dispatcher's
    recovery horizon (five dispatcher runs: the dispatcher enqueues again, within one run, an
    overdue task whose job is not queued). task_waiting_due_idx, then one pipelined read of the
    overdue tasks' RQ jobs and one of their workers; with Redis unreachable every overdue task is
    reported, saying so. In a deep backlog a worker takes a job between the database read and the
    Redis one, so the tasks found are read again after Redis, and one that moved on meanwhile (no
    longer waiting, or its due time, attempt count or job changed) is not reported; a worker that
    has taken a job off its queue and not yet started it leaves it "stranded" for a moment, so a
    stranded job is looked at again after STRANDED_SECOND_LOOK and counts only if it still is."""
    waiting = f"SELECT id, state, next_run_at, attempt_count, rq_job_id FROM {_T} WHERE state IN {_in(WAITING_STATES)}"
    rows = _rows(f"{waiting} AND next_run_at < %(before)s ORDER BY next_run_at, id",
                 {"before": h.now - h.dispatch_grace})
    job_ids = [job for *_, job in rows if job]
    jobs, unknown = {}, ""
    if job_ids:
        import django_rq
        from redis.exceptions import RedisError

        from scheduling.queueing import FLOW_QUEUE
        from scheduling.services.recovery import STRANDED

        redis = h.jobs_redis or django_rq.get_connection(FLOW_QUEUE)
        try:
            jobs = _rq_jobs(job_ids, redis)
            # A healthy worker's job is off its queue, and not yet started, between its BLPOP (BLMOVE)
            # and its work horse's first write, and when it took it is recorded nowhere: a job is
            # stranded only if the same job still is after a pause.
            stranded = [job_id for job_id, (_, said) in jobs.items() if said == STRANDED]
            if stranded:
                time.sleep(STRANDED_SECOND_LOOK.total_seconds())
                jobs.update(_rq_jobs(stranded, redis))
        except RedisError as exc:
            if h.jobs_redis is not None:
                raise
            unknown = f" (status unknown: {type(exc).__name__})"
    rows = [row for row in rows if not jobs.get(row[-1], (False,))[0]]
    if rows:
        # Only rows exactly as first read stay: a task row a worker changed is not the one judged.
        unchanged = set(_rows(f"{waiting} AND id = ANY(%(ids)s)", {"ids": [row[0] for row in rows]}))
        rows = [row for row in rows if row in unchanged]
    return [Violation({"task": tid}, f"{state}, due at {due.isoformat()}, overdue by "
                                     f"{(h.now - due).total_seconds():.0f} s (horizon "
                                     f"{h.dispatch_grace.total_seconds():g} s), RQ job "
                                     + (f"{job} {jobs.get(job, (False, 'gone'))[1]}{unknown}" if job else "none"))
            for tid, state, due, _, job in rows]


def _rq_jobs(job_ids: list[str], redis) -> dict[str, tuple[bool, str]]:
    """For each job RQ can read: whether it will run its task, and its status as a violation says
    it. A queued job will while it is on its queue (the dispatcher's rule, job_statuses: one a dead
    worker took off the queue is "stranded"); a started one only while its worker (job.worker_name)
    is registered and names it as its current job: a worker SIGKILLed after it took the job, before
    the attempt was written, leaves the job STARTED for good. Reads only (rq's Worker.find_by_key
    would prune the worker registry)."""
    from rq.utils import as_text
    from rq.worker import Worker

    from scheduling.services.recovery import fetch_jobs, statuses_of

    jobs = fetch_jobs(job_ids, redis)
    status_of = statuses_of(jobs, redis)
    started = {job_id: jobs[job_id].worker_name or "" for job_id, status in status_of.items()
               if status == JobStatus.STARTED}
    workers = sorted(set(started.values()) - {""})
    current = {}
    if workers:
        with redis.pipeline(transaction=False) as pipe:
            for name in workers:
                pipe.hget(Worker.redis_worker_namespace_prefix + name, "current_job")
            current = {name: as_text(job_id) for name, job_id in zip(workers, pipe.execute()) if job_id}
    judged = {}
    for job_id, status in status_of.items():
        said = getattr(status, "value", status)
        if status != JobStatus.STARTED:
            judged[job_id] = (status == JobStatus.QUEUED, said)
        elif started.get(job_id) and current.get(started[job_id]) == job_id:
            judged[job_id] = (True, said)
        else:
            judged[job_id] = (False, f"started by worker {started.get(job_id) or '(none named)'}, which is not "
                                     "running it (gone, or on another job)")
    return judged


def dead_letters(h: Horizons) -> list[Violation]:
    """Every task.dead event (within the window, past the consumer's grace) has its dead letter:
    the task's own, or the one it replayed (a replay that dies stays on its letter).
    task_event_kind_time_idx, then the dead letters' task and replay_task indexes."""
    rows = _rows(f"""
        SELECT e.id, e.task_id, e.created_at FROM {_TE} e
        WHERE e.kind = %(dead)s AND e.created_at >= %(since)s AND e.created_at < %(before)s
          AND NOT EXISTS (SELECT 1 FROM {_DL} d WHERE d.task_id = e.task_id)
          AND NOT EXISTS (SELECT 1 FROM {_DL} d WHERE d.replay_task_id = e.task_id)
        ORDER BY e.id""", {"dead": TaskEventKind.DEAD, "since": h.since, "before": h.now - h.dead_letter_grace})
    return [Violation({"task_event": eid, "task": tid},
                      f"task.dead at {at.isoformat()} has no dead letter")
            for eid, tid, at in rows]


def work_orders(h: Horizons) -> list[Violation]:
    """Every open dead letter older than the escalation's grace is on a live work order: none of
    escalation's orphans (compensation.services.escalation.orphaned_dead_letters, the rows it gives
    work orders) has been one for longer than that, counted from its work order's end when it had
    one: cancelling leaves its letters open for the next escalation run to re-home.
    dead_letter_state_age_idx (open ones by age)."""
    rows = (orphaned_dead_letters(before=h.now - h.work_order_grace).order_by("died_at", "id")
            .values_list("id", "task_id", "died_at", "work_order_id", "work_order__state"))
    return [Violation({"dead_letter": did, "task": tid, "work_order": wid},
                      f"open since {died.isoformat()} with " + (f"an ended work order ({wstate})" if wid
                                                                else "no work order"))
            for did, tid, died, wid, wstate in rows]


def audit_rows(h: Horizons) -> list[Violation]:
    """Every operator action on a work order or a dead letter has its audit row: a work order an
    operator opened has work_order.open; one that left `open` has a work_order.transition; a dead
    letter (died within the window) replayed, resolved or discarded has its dead_letter.* entry.
    audit_target_history_idx per row; work orders are few, dead letters come by
    dead_letter_state_age_idx."""
    wo_type, dl_type = WorkOrder._meta.label_lower, DeadLetter._meta.label_lower
    rows = _rows(f"""
        SELECT 'work_order', w.id, CASE WHEN w.source = %(manual)s AND NOT EXISTS (
                    SELECT 1 FROM {_AU} a WHERE a.target_type = %(wo_type)s AND a.target_id = w.id::text
                    AND a.action = %(open_action)s) THEN %(open_action)s ELSE %(move_action)s END
        FROM {_WO} w
        WHERE (w.source = %(manual)s AND NOT EXISTS (
                   SELECT 1 FROM {_AU} a WHERE a.target_type = %(wo_type)s AND a.target_id = w.id::text
                   AND a.action = %(open_action)s))
           OR (w.state <> %(wo_open)s AND NOT EXISTS (
                   SELECT 1 FROM {_AU} a WHERE a.target_type = %(wo_type)s AND a.target_id = w.id::text
                   AND a.action = %(move_action)s))
        UNION ALL
        SELECT 'dead_letter', d.id, d.state FROM {_DL} d
        WHERE d.state = ANY(%(acted)s) AND d.died_at >= %(since)s
          AND NOT EXISTS (SELECT 1 FROM {_AU} a WHERE a.target_type = %(dl_type)s AND a.target_id = d.id::text
                          AND a.action = ANY(%(dl_actions)s))
        ORDER BY 1, 2""", {
        "manual": WorkOrderSource.MANUAL, "wo_type": wo_type, "wo_open": WorkOrderState.OPEN,
        "open_action": AuditAction.WORK_ORDER_OPEN, "move_action": AuditAction.WORK_ORDER_TRANSITION,
        "dl_type": dl_type, "since": h.since,
        "acted": list(str(s) for s in (DeadLetterState.REPLAYING, DeadLetterState.REPLAYED,
                                        DeadLetterState.RESOLVED, DeadLetterState.DISCARDED)),
        "dl_actions": list(str(a) for a in (AuditAction.DEAD_LETTER_REPLAY, AuditAction.DEAD_LETTER_RESOLVE,
                                             AuditAction.DEAD_LETTER_DISCARD)),
    })
    found = []
    for what, oid, detail in rows:
        if what == "work_order":
            found.append(Violation({"work_order": oid}, f"has no {detail} audit entry"))
        else:
            found.append(Violation({"dead_letter": oid}, f"is {detail} but has no dead_letter.* audit entry"))
    return found


def late_outcomes(h: Horizons) -> list[Violation]:
    """No execution outlives its attempt: every task.outcome.late event (within the window) is an
    attempt given up as lost, its resource free to be handed on, while its flow still ran — and,
    when the success it reported was dropped, a success the task will run again. What the
    database's leases cannot show: they say who holds a resource, not who still acts on it.
    task_event_kind_time_idx."""
    rows = _rows(f"""
        SELECT e.id, e.task_id, e.attempt_number, e.details ->> 'outcome', (e.details ->> 'kept')::boolean
        FROM {_TE} e WHERE e.kind = %(late)s AND e.created_at >= %(since)s ORDER BY e.id""",
                 {"late": TaskEventKind.LATE_OUTCOME, "since": h.since})
    found = []
    for event_id, task_id, number, outcome, kept in rows:
        why = f"attempt {number} was given up as lost while its worker still ran it (its flow {outcome} later)"
        if outcome == AttemptOutcome.SUCCEEDED and not kept:
            why += "; its success was dropped, and the task may run the business instance again"
        found.append(Violation({"task_event": event_id, "task": task_id}, why))
    return found


# In the order they print. Deep ones run only when asked for (deep, or by name).
CHECKS: dict[str, Callable[[Horizons], list[Violation]]] = {
    "lease_holders": lease_holders,
    "double_leases": double_leases,
    "counters": counters,
    "overdue_tasks": overdue_tasks,
    "dead_letters": dead_letters,
    "work_orders": work_orders,
    "audit_rows": audit_rows,
    "late_outcomes": late_outcomes,
}
DEEP = frozenset({"counters"})


def check_invariants(*, names: list[str] | None = None, deep: bool = False, now: datetime | None = None,
                     limit: int = DEFAULT_LIMIT) -> list[CheckResult]:
    """Run the named checks (default: all but the deep ones, or all of them when `deep`). Each is
    one statement, so it reads one snapshot and never sees half a transaction; overdue_tasks then
    reads again the few tasks it found, to drop those a worker moved on while it asked Redis."""
    unknown = [n for n in names or [] if n not in CHECKS]
    if unknown:
        raise ValueError(f"unknown check {', '.join(unknown)}; the checks are {', '.join(CHECKS)}")
    chosen = names or [n for n in CHECKS if deep or n not in DEEP]
    horizons = Horizons.from_settings(now=now, deep=deep)
    results = []
    for name in chosen:
        found = CHECKS[name](horizons)
        results.append(CheckResult(name=name, count=len(found), violations=found[:limit]))
    return results
