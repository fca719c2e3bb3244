"""An attempt's start (lock, claim, record) and its end (record, release or hold, retry or end)."""

import json
import logging
import uuid
from dataclasses import dataclass
from datetime import datetime

from django.db import connection, transaction
from django.db.models.functions import Now

import resources.services
import resources.sql
from resources.choices import FailureCategory, LeaseKind
from resources.classification import Classification
from resources.errors import PoolExhausted, ResourceUnavailable
from resources.models import Resource, ResourcePool
from retryops.masking import mask_secrets
from scheduling.choices import (
    WAITING_STATES,
    AttemptOutcome,
    PatternAction,
    TaskEventKind,
    TaskState,
)
from scheduling.errors import FlowNotFound
from scheduling.flows import FlowContext, get_flow, loaded_flows
from scheduling.models import Attempt, Task
from scheduling.policies import Verdict, judge
from scheduling.services.claims import claim_failure_verdict, claim_for
from scheduling.services.events import emit
from scheduling.services.failures import after_failure, close_failed, error_fields
from scheduling.services.probes import finish_probe

log = logging.getLogger(__name__)


@dataclass
class StartedAttempt:
    attempt: Attempt
    context: FlowContext
    flow: object
    lease_seconds: float


@dataclass
class EarlyWakeup:
    """A delivery that came before its attempt was due, by PostgreSQL's clock: `seconds` early."""

    seconds: float


def begin_attempt(*, task_id: int, attempt_number: int, worker: str = "",
                  rq_job_id: str = "") -> StartedAttempt | EarlyWakeup | None:
    """Lock the task, make sure this delivery is the one due, claim the resource, record the attempt.
    Returns None when there is nothing to run (a duplicate delivery, a failed claim), and an
    EarlyWakeup when the attempt is not due yet: whether it is due is PostgreSQL's clock's call,
    not the worker host's (the caller waits, or enqueues it again that many seconds later)."""
    started = _start_at_once(task_id=task_id, attempt_number=attempt_number, worker=worker, rq_job_id=rq_job_id)
    if started is not None:
        return started
    with transaction.atomic():
        task = Task.objects.select_for_update(of=("self",)).filter(pk=task_id).annotate(db_now=Now()).first()
        if task is None or task.state not in WAITING_STATES or task.attempt_count + 1 != attempt_number:
            return None  # delivered twice, or for an attempt that has already happened
        now = task.db_now
        if task.next_run_at > now:
            return EarlyWakeup((task.next_run_at - now).total_seconds())
        try:
            flow = get_flow(task.flow)
        except FlowNotFound as exc:
            record_unrun_attempt(task, attempt_number, now, exc, Verdict(
                Classification(FailureCategory.NON_RETRYABLE, None, str(exc)), PatternAction.DEAD_LETTER))
            return None
        try:
            lease = claim_for(task)
        except (ResourceUnavailable, PoolExhausted) as exc:
            record_unrun_attempt(task, attempt_number, now, exc, claim_failure_verdict(exc))
            return None
        attempt = Attempt(
            task=task, number=attempt_number, resource=lease, lease_token=lease.lease_token,
            fencing_token=lease.fencing_token, worker=worker[:200], rq_job_id=rq_job_id, started_at=now,
            scheduled_for=task.next_run_at,
        )
        _record_start(attempt)
        instance_key = task.idempotency_key if task.first_run_id is None else \
            Task.objects.filter(pk=task.first_run_id).values_list("idempotency_key", flat=True).first()
    return _started(task, attempt, lease, flow, now, instance_key)


def _started(task: Task, attempt: Attempt, lease: Resource, flow, now: datetime,
             instance_key: str | None) -> StartedAttempt:
    resource_id, token = lease.pk, lease.lease_token
    context = FlowContext(
        task_id=task.pk, attempt=attempt.number, payload=task.payload, resource_key=lease.key,
        resource_attributes=lease.attributes, idempotency_key=instance_key or task.idempotency_key,
        lease_token=str(token), fencing_token=lease.fencing_token,
        heartbeat=lambda: resources.services.extend_lease(resource=resource_id, lease_token=token),
        check_lease=lambda: resources.services.check_lease(resource=resource_id, lease_token=token),
    )
    lease_seconds = (lease.leased_until - now).total_seconds()
    return StartedAttempt(attempt=attempt, context=context, flow=flow, lease_seconds=lease_seconds)


def _columns(model) -> list[str]:
    return [field.column for field in model._meta.concrete_fields]


def _from_row(model, values: list):
    """A model instance from its concrete columns' values in field order, jsonb decoded as Django does."""
    fields = model._meta.concrete_fields
    values = [field.from_db_value(value, None, connection) if hasattr(field, "from_db_value") else value
              for field, value in zip(fields, values)]
    return model.from_db(connection.alias, [field.attname for field in fields], values)


# The start of an attempt that needs nothing but a free resource of its pool (no lease held or
# reserved for it, no resource named, not a probe, a flow loaded already), in one statement: lock
# the task if this attempt is the one due, claim (resources.sql.claim_next_ctes, from a random
# available id), record the attempt and make the task running, as _START_SQL does. Outside a
# transaction the statement is one, so the transaction's BEGIN and COMMIT round trips go too; its
# commit waits for the WAL flush, as _START_SQL's does. No row: anything else (not due, a
# duplicate, a held or named resource, nothing free past the random start), which begin_attempt's
# transaction then sorts out.
_TASK_COLUMNS, _RESOURCE_COLUMNS = _columns(Task), _columns(Resource)
_FAST_START_SQL = f"""
    WITH task AS (
        SELECT {", ".join(f"t.{column}" for column in _TASK_COLUMNS)}, now() AS db_now FROM {Task._meta.db_table} t
        WHERE t.id = %(task)s AND t.state IN {tuple(str(state) for state in WAITING_STATES)}
              AND t.attempt_count + 1 = %(number)s AND t.next_run_at <= now() AND t.held_lease_token IS NULL
              AND t.pinned_resource_id IS NULL AND NOT t.is_probe AND t.flow = ANY(%(flows)s)
        FOR UPDATE OF t
    ), {resources.sql.claim_next_ctes(pool_id="(SELECT pool_id FROM task)", start_id=None)},
    attempt AS (
        INSERT INTO {Attempt._meta.db_table}
            (task_id, number, resource_id, lease_token, fencing_token, worker, rq_job_id, started_at, scheduled_for,
             outcome, error_class, error_message, error_signature, category, action)
        SELECT task.id, %(number)s, claimed.id, claimed.lease_token, claimed.fencing_token, %(worker)s, %(job)s,
               task.db_now, task.next_run_at, 'running', '', '', '', '', ''
        FROM task, claimed
        RETURNING id
    ), started AS (
        UPDATE {Task._meta.db_table} t
        SET state = 'running', attempt_count = %(number)s, resource_id = claimed.id, held_lease_token = claimed.lease_token
        FROM claimed WHERE t.id = %(task)s
    )
    SELECT attempt.id, task.db_now, {", ".join(f"task.{column}" for column in _TASK_COLUMNS)},
           {", ".join(f"claimed.{column}" for column in _RESOURCE_COLUMNS)}
    FROM attempt, task, claimed
"""


def _start_at_once(*, task_id: int, attempt_number: int, worker: str, rq_job_id: str) -> StartedAttempt | None:
    if connection.in_atomic_block:
        return None  # the caller's transaction would hold the claim's locks: the general path is as good
    holder = Task(pk=task_id).holder
    with connection.cursor() as cursor:
        cursor.execute(_FAST_START_SQL, {
            "task": task_id, "number": attempt_number, "flows": loaded_flows(), "worker": worker[:200],
            "job": rq_job_id, "token": uuid.uuid4(), "holder": holder, "lease_seconds": None, "actor": holder,
            "details": "{}", "lease_kind": LeaseKind.USE,
        })
        row = cursor.fetchone()
    if row is None:
        return None
    attempt_id, now, values = row[0], row[1], list(row[2:])
    task = _from_row(Task, values[:len(_TASK_COLUMNS)])
    lease = _from_row(Resource, values[len(_TASK_COLUMNS):])
    task.state, task.attempt_count = TaskState.RUNNING, attempt_number
    task.resource_id, task.held_lease_token = lease.pk, lease.lease_token
    attempt = Attempt(
        pk=attempt_id, task=task, number=attempt_number, resource=lease, lease_token=lease.lease_token,
        fencing_token=lease.fencing_token, worker=worker[:200], rq_job_id=rq_job_id, started_at=now,
        scheduled_for=task.next_run_at, outcome=AttemptOutcome.RUNNING,
    )
    attempt._state.adding = False
    instance_key = None if task.first_run_id is None else \
        Task.objects.filter(pk=task.first_run_id).values_list("idempotency_key", flat=True).first()
    return _started(task, attempt, lease, get_flow(task.flow), now, instance_key)


# Every attempt passes through here and through _succeed, so each is one statement (insert the
# attempt and move the task, in one round trip) rather than two ORM writes. A success clears the
# task's copy of its latest error (an earlier attempt's); the attempts keep their own.
#
# The start's commit waits for its WAL flush: a start forgotten by a PostgreSQL crash would forget
# its claim too, while its flow runs on, and the resource (with the same fencing token, which the
# crash rolled back as well) could go to a second flow.
_START_SQL = f"""
    WITH attempt AS (
        INSERT INTO {Attempt._meta.db_table}
            (task_id, number, resource_id, lease_token, fencing_token, worker, rq_job_id, started_at, scheduled_for,
             outcome, error_class, error_message, error_signature, category, action)
        VALUES (%(task)s, %(number)s, %(resource)s, %(token)s, %(fence)s, %(worker)s, %(job)s, %(now)s, %(due)s,
                'running', '', '', '', '', '')
        RETURNING id
    ), task AS (
        UPDATE {Task._meta.db_table}
        SET state = 'running', attempt_count = %(number)s, resource_id = %(resource)s, held_lease_token = %(token)s
        WHERE id = %(task)s
    )
    SELECT id FROM attempt
"""


# A success ends a running attempt; it also ends an attempt the dispatcher gave up as lost
# (abandoned) while its flow in fact went on and succeeded, provided no newer attempt has started:
# the task is still waiting for the retry the abandonment scheduled, which this cancels (a waiting
# task that is no longer waiting is skipped by begin_attempt). Running the flow again would repeat
# a side effect that has happened. `kept_late` says which of the two it was.
# The same statement gives the resource back (resources.sql.release_success_ctes), only once the
# success is recorded: a success dropped as too late must not release a lease a newer attempt may
# hold under the same token (a hold for the retry keeps it). `released` says whether it did.
_SUCCESS_SQL = f"""
    WITH before AS (
        -- Both rows locked, and the condition checked again on the rows as they are once locked
        -- (READ COMMITTED re-reads a row it waited for): a retry's begin_attempt that commits while
        -- this waits has made the task running, and the late success is then dropped, not kept.
        SELECT a.id, a.outcome FROM {Attempt._meta.db_table} a JOIN {Task._meta.db_table} t ON t.id = a.task_id
        WHERE a.id = %(attempt)s AND (a.outcome = 'running' OR (
            a.outcome = 'abandoned' AND t.state IN {tuple(str(state) for state in WAITING_STATES)}
            AND t.attempt_count = a.number))
        FOR UPDATE OF a, t
    ), attempt AS (
        UPDATE {Attempt._meta.db_table} a SET outcome = 'succeeded', finished_at = now(), duration_ms = %(ms)s,
            error_class = '', error_message = '', error_signature = '', category = '', action = ''
        FROM before WHERE a.id = before.id
        RETURNING before.outcome = 'abandoned' AS kept_late
    ), task AS (
        UPDATE {Task._meta.db_table} SET state = 'succeeded', finished_at = now(), result = %(result)s::jsonb,
            held_lease_token = NULL, last_error = '', last_error_signature = '', last_error_category = ''
        FROM attempt
        WHERE id = %(task)s
        RETURNING attempt.kept_late, finished_at
    ), {resources.sql.release_success_ctes(only_if="EXISTS (SELECT FROM task)")}
    SELECT task.kept_late, task.finished_at, EXISTS (SELECT FROM released) FROM task
"""


def _record_start(attempt: Attempt) -> None:

    with connection.cursor() as cursor:
        cursor.execute(_START_SQL, {
            "task": attempt.task_id, "number": attempt.number, "resource": attempt.resource_id,
            "token": attempt.lease_token, "fence": attempt.fencing_token, "worker": attempt.worker, "job": attempt.rq_job_id,
            "now": attempt.started_at, "due": attempt.scheduled_for,
        })
        attempt.pk = cursor.fetchone()[0]
    attempt._state.adding = False


def record_unrun_attempt(task: Task, number: int, now: datetime, error: Exception, verdict: Verdict) -> None:
    """An attempt that never reached its flow (the resource could not be had): it still counts."""
    attempt = Attempt.objects.create(
        task=task, number=number, started_at=now, scheduled_for=task.next_run_at, finished_at=now,
        outcome=AttemptOutcome.FAILED, duration_ms=0, **error_fields(error, verdict),
    )
    task.attempt_count = number
    task.save(update_fields=["attempt_count"])
    after_failure(task, attempt, verdict, error, now)


def finish_attempt(*, attempt: Attempt, result=None, error: BaseException | None = None,
                   raised: BaseException | None = None, duration: float = 0.0) -> Attempt:
    """Record an attempt's outcome, release or hold its resource, and retry or end the task. The
    result is kept with the values of secret keys masked: it is only ever shown (console, API,
    dead letters), and a flow that echoes its resource's attributes must not copy a secret there.
    `raised` is the error as the flow raised it, when `error` is the stand-in stored in its place
    (its secrets masked): the policy judges `raised`, so a mask cannot change the verdict."""
    result = mask_secrets(result)
    is_probe = attempt.task.is_probe
    with transaction.atomic():
        # Lock order, here and in recover_lost_attempts: the attempt, then its task.
        if error is None and not is_probe:
            return _succeed(attempt, result, duration)
        attempt = Attempt.objects.select_for_update().annotate(db_now=Now()).get(pk=attempt.pk)
        now = attempt.db_now  # PostgreSQL's clock: the retry's due time and the hold are computed from it
        if is_probe:
            return finish_probe(attempt, result, error, now, duration)
        if attempt.outcome != AttemptOutcome.RUNNING:
            log.warning("%s finished after it was %s; its outcome is dropped", attempt, attempt.outcome)
            if attempt.outcome == AttemptOutcome.ABANDONED:
                emit(attempt.task, TaskEventKind.LATE_OUTCOME, attempt_number=attempt.number,
                     outcome=AttemptOutcome.FAILED, kept=False)
            return attempt
        task = Task.objects.select_for_update().get(pk=attempt.task_id)
        attempt.duration_ms = int(duration * 1000)
        verdict = judge(task.policy, error if raised is None else raised)
        close_failed(attempt, outcome=AttemptOutcome.FAILED, error=error, verdict=verdict, now=now)
        after_failure(task, attempt, verdict, error, now)
    return attempt


def _succeed(attempt: Attempt, result, duration: float) -> Attempt:

    task = Task(pk=attempt.task_id)
    with connection.cursor() as cursor:
        # One statement: the attempt's row (locked first), then the task's.
        cursor.execute(_SUCCESS_SQL, {"attempt": attempt.pk, "task": task.pk, "ms": int(duration * 1000),
                                      "result": json.dumps(result), "resource_id": attempt.resource_id,
                                      "token": attempt.lease_token, "actor": task.holder,
                                      "details": json.dumps({"attempt": attempt.number})})
        recorded = cursor.fetchone()
    if recorded is None:  # given up as lost, and a newer attempt has started (or the task ended) since
        current = Attempt.objects.get(pk=attempt.pk)
        log.error("%s succeeded after it was %s and a newer attempt had started; its success is dropped",
                  attempt, current.outcome)
        if current.outcome == AttemptOutcome.ABANDONED:
            emit(task, TaskEventKind.LATE_OUTCOME, attempt_number=attempt.number, outcome=AttemptOutcome.SUCCEEDED,
                 kept=False)
        return current
    kept_late, now, released = recorded
    if kept_late:
        log.warning("%s succeeded after it was given up as lost; no newer attempt had started, so the success "
                    "stands and the retry is cancelled", attempt)
        emit(task, TaskEventKind.LATE_OUTCOME, attempt_number=attempt.number, outcome=AttemptOutcome.SUCCEEDED,
             kept=True)
    if not released:
        log.warning("%s succeeded but its lease was gone (swept, or released by its worker)", attempt)
    attempt.outcome, attempt.finished_at, attempt.duration_ms = AttemptOutcome.SUCCEEDED, now, int(duration * 1000)
    if attempt.number > 1:
        emit(task, TaskEventKind.RETRY_SUCCEEDED, attempt_number=attempt.number, resource=attempt.resource_id)
    return attempt


# The attempt's lease, renewed on PostgreSQL's clock by the worker that watches the work horse
# (retryops.worker), in one round trip: it finds the attempt by the unique (task, number) index,
# if that worker's work horse started it from that job: a duplicate wake-up's horse (on another
# worker, or of the same job run twice) does not keep, nor lose, an attempt another horse runs.
_KEEP_LEASE_SQL = f"""
    WITH attempt AS (
        SELECT a.outcome, a.resource_id, a.lease_token, a.fencing_token FROM {Attempt._meta.db_table} a
        WHERE a.task_id = %(task)s AND a.number = %(number)s AND a.worker = %(worker)s AND a.rq_job_id = %(job)s
    ), renewed AS (
        -- The lease in use by this attempt only (its fencing token): not the hold its failure has
        -- just made of it (same lease token, kept until the retry), nor the next attempt's use of it.
        UPDATE {Resource._meta.db_table} r
        SET leased_until = now() + make_interval(secs => p.lease_seconds), lapse_seen_at = NULL
        FROM attempt, {ResourcePool._meta.db_table} p
        WHERE attempt.outcome = 'running' AND r.id = attempt.resource_id AND r.lease_token = attempt.lease_token
              AND r.fencing_token = attempt.fencing_token AND r.lease_kind = 'use'
              AND r.state = 'in_use' AND p.id = r.pool_id
        RETURNING p.lease_seconds
    )
    SELECT attempt.outcome, (SELECT lease_seconds FROM renewed) FROM attempt
"""


@dataclass
class LeaseKept:
    """What keep_attempt_lease found: `state` is not_started, renewed, lost or ended; `lease_seconds` is the
    pool's lease when it was renewed."""

    state: str
    lease_seconds: int | None = None


# not_started: no attempt row yet (begin_attempt has not committed), it was never made, or another
# worker or job started it (a duplicate wake-up);
# renewed: running and still holding its lease; lost: running without its lease (swept), or
# given up as lost already: whatever it does now, another attempt may hold the resource;
# ended: it recorded its outcome.


def keep_attempt_lease(*, task_id: int, attempt_number: int, worker: str, rq_job_id: str) -> LeaseKept:
    """Renew the lease of a task's attempt for its pool's lease length from now, if the attempt is
    running and still holds it, and was started by `worker` from the job `rq_job_id`. What the worker
    process does every quarter lease while its work horse runs the flow (retryops.worker)."""
    with connection.cursor() as cursor:
        cursor.execute(_KEEP_LEASE_SQL, {"task": task_id, "number": attempt_number, "worker": worker[:200],
                                         "job": rq_job_id})
        row = cursor.fetchone()
    if row is None:
        return LeaseKept("not_started")
    outcome, lease_seconds = row
    if outcome == AttemptOutcome.RUNNING:
        return LeaseKept("renewed", lease_seconds) if lease_seconds is not None else LeaseKept("lost")
    return LeaseKept("lost" if outcome == AttemptOutcome.ABANDONED else "ended")
