"""Tasks and their attempts: the only code that changes them. Jobs, commands and the admin call these.

A task's life: start_task writes it (and, for reserved resources, claims the resource in the
same transaction) and enqueues a job once that commits. The job calls run_attempt: begin_attempt
locks the task, checks that this delivery is the one due, claims the resource and records the
attempt; the flow runs outside any transaction; finish_attempt records the outcome, releases
or holds the resource, and schedules the retry or marks the task dead. The database decides
everything; Redis only carries wake-ups, which the dispatcher re-creates when they are lost.
"""

import json
import logging
import math
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from resources import services as pool
from resources.choices import FailureCategory, Outcome, ResourceState
from resources.classification import Classification
from resources.errors import LeaseMismatch, PoolExhausted, ResourceError, ResourceNotFound, ResourceUnavailable
from resources.models import Resource, ResourcePool
from scheduling.choices import WAITING_STATES, AttemptOutcome, PatternAction, TaskEventKind, TaskState
from scheduling.flows import FlowContext, UnknownFlow, get_flow
from scheduling.models import Attempt, BatchConfig, RetryPolicy, Task, TaskEvent
from scheduling.policies import Verdict, judge, retry_delay
from scheduling.signals import BY_KIND
from scheduling.signatures import error_signature

log = logging.getLogger(__name__)

FLOW_QUEUE = "flows"
ABANDONED_REASON = "worker lost: its lease expired before the attempt finished"


class TaskError(ValueError):
    """Bad input for a task (unknown flow, payload that is not a JSON object, unknown policy)."""


# --- starting ---------------------------------------------------------------------------


def parse_payload(payload) -> dict:
    """A payload is a JSON object, given as a dict or as JSON text."""
    if isinstance(payload, str):
        try:
            payload = json.loads(payload)
        except json.JSONDecodeError as exc:
            raise TaskError(f"payload is not JSON: {exc}") from None
    if payload is None:
        return {}
    if not isinstance(payload, dict):
        raise TaskError(f"payload must be a JSON object, got {type(payload).__name__}")
    try:
        json.dumps(payload)
    except (TypeError, ValueError) as exc:
        raise TaskError(f"payload cannot be stored as JSON: {exc}") from None
    return payload


def get_policy(policy: RetryPolicy | str | None) -> RetryPolicy:
    if isinstance(policy, RetryPolicy):
        return policy
    name = policy or getattr(settings, "RETRYOPS_DEFAULT_POLICY", "default")
    try:
        return RetryPolicy.objects.get(name=name)
    except RetryPolicy.DoesNotExist:
        raise TaskError(f"no retry policy {name!r}; load them with manage.py load_retry_policies") from None


def start_task(*, flow: str, pool_name: ResourcePool | int | str, created_by: str, payload=None,
               policy: RetryPolicy | str | None = None, resource: Resource | int | None = None,
               strict: bool = True, reserve: bool = False, claim_now: bool = False,
               idempotency_key: str | None = None, run_at: datetime | None = None, probe: bool = False) -> Task:
    """Write a task and enqueue its first attempt once the transaction commits.

    `resource` names the resource to run on (strict by default). With `reserve`, that resource is
    claimed now, in this transaction, and held for the task; with `claim_now`, any resource of the
    pool is. A repeated `idempotency_key` returns the task it started the first time."""
    try:
        get_flow(flow)
    except UnknownFlow as exc:
        raise TaskError(str(exc)) from None
    payload = parse_payload(payload)
    if not created_by:
        raise TaskError("created_by must say who or what starts the task")
    if idempotency_key:
        existing = Task.objects.filter(idempotency_key=idempotency_key).first()
        if existing is not None:
            return existing
    target_pool = pool.get_pool(pool_name)
    policy = get_policy(policy)
    pinned = None
    if resource is not None:
        pinned = resource if isinstance(resource, Resource) else pool.get_resource(resource_id=resource)
        if pinned.pool_id != target_pool.pk:
            raise TaskError(f"resource {pinned.key} belongs to pool {pinned.pool.name}, not {target_pool.name}")
    now = timezone.now()
    try:
        return _create_task(flow=flow, target_pool=target_pool, payload=payload, policy=policy, strict=strict,
                            pinned=pinned, created_by=created_by, idempotency_key=idempotency_key, run_at=run_at,
                            now=now, probe=probe, reserve=reserve, claim_now=claim_now)
    except IntegrityError:
        # Two starts with one key at once: the loser returns the winner's task.
        existing = Task.objects.filter(idempotency_key=idempotency_key).first() if idempotency_key else None
        if existing is None:
            raise
        return existing


def _create_task(*, flow, target_pool, payload, policy, strict, pinned, created_by, idempotency_key, run_at, now,
                 probe, reserve, claim_now) -> Task:
    with transaction.atomic():
        task = Task.objects.create(
            flow=flow, pool=target_pool, payload=payload, policy=policy, strict=strict,
            requested_resource=pinned, pinned_resource=pinned, created_by=created_by[:200], is_probe=probe,
            idempotency_key=idempotency_key or uuid.uuid4().hex,
            state=TaskState.SCHEDULED if run_at and run_at > now else TaskState.PENDING,
            next_run_at=max(run_at or now, now),
            deadline_at=now + timedelta(seconds=policy.deadline_seconds) if policy.deadline_seconds else None,
        )
        # A lease taken now must last until the first attempt is due, and then some.
        lease_seconds = math.ceil((task.next_run_at - now).total_seconds()) + target_pool.lease_seconds
        if probe:
            _hold(task, pool.claim_for_probe(resource=pinned, holder=task.holder, lease_seconds=lease_seconds))
        elif reserve or claim_now:
            if pinned is not None:
                lease = pool.claim_by_id(resource_id=pinned.pk, holder=task.holder, strict=strict,
                                         lease_seconds=lease_seconds)
            else:
                lease = pool.claim_next(pool=target_pool, holder=task.holder, lease_seconds=lease_seconds)
            _hold(task, lease)
        _enqueue_after_commit(task)
    return task


def _hold(task: Task, lease: Resource) -> None:
    task.resource, task.pinned_resource, task.held_lease_token = lease, lease, lease.lease_token
    task.save(update_fields=["resource", "pinned_resource", "held_lease_token"])


# --- enqueueing -------------------------------------------------------------------------


def _enqueue_after_commit(task: Task) -> None:
    task_id, number, at = task.pk, task.attempt_count + 1, task.next_run_at
    transaction.on_commit(lambda: enqueue_attempt(task_id=task_id, attempt_number=number, at=at), robust=True)


def enqueue_attempt(*, task_id: int, attempt_number: int, at: datetime | None = None) -> str | None:
    """Put the wake-up for a task's attempt on the queue. A Redis that does not answer is logged,
    not raised: the task is safe in the database and the dispatcher enqueues it later."""
    import django_rq
    from redis.exceptions import RedisError

    from scheduling.jobs import run_attempt_job

    job_id = f"task-{task_id}-{attempt_number}-{uuid.uuid4().hex[:8]}"
    try:
        queue = django_rq.get_queue(FLOW_QUEUE)
        if at is not None and at > timezone.now() + timedelta(milliseconds=500):
            # Up to a second early (see MAX_EARLY_WAIT): run_attempt waits out the rest.
            queue.enqueue_at(at, run_attempt_job, task_id, attempt_number, at.timestamp(), job_id=job_id,
                             result_ttl=0)
        else:
            # The outcome lives in the Attempt row; RQ need not keep a copy (result_ttl=0).
            queue.enqueue(run_attempt_job, task_id, attempt_number, job_id=job_id, result_ttl=0)
    except RedisError as exc:
        log.warning("task %s attempt %s not enqueued (%s); the dispatcher will", task_id, attempt_number, exc)
        return None
    Task.objects.filter(pk=task_id, attempt_count=attempt_number - 1).update(rq_job_id=job_id)
    return job_id


# --- running ----------------------------------------------------------------------------


@dataclass
class StartedAttempt:
    attempt: Attempt
    context: FlowContext
    flow: object
    lease_seconds: float


def _emit(task: Task, kind: str, *, attempt_number: int | None = None, **details) -> None:
    TaskEvent.objects.create(task=task, kind=kind, attempt_number=attempt_number, details=details)
    signal = BY_KIND[kind]
    task_id = task.pk
    transaction.on_commit(
        lambda: signal.send(sender=Task, task_id=task_id, attempt_number=attempt_number, details=details), robust=True
    )


def _claim_for(task: Task) -> Resource:
    """The resource this attempt runs on: the task's held lease, else its pinned resource, else any."""
    if task.held_lease_token:
        try:
            return pool.extend_lease(resource=task.resource_id, lease_token=task.held_lease_token)
        except (LeaseMismatch, ResourceNotFound):
            pass  # the hold ran out and was swept; claim the pinned resource again below
    if task.pinned_resource_id:
        return pool.claim_by_id(resource_id=task.pinned_resource_id, holder=task.holder, strict=task.strict)
    return pool.claim_next(pool=task.pool_id, holder=task.holder)


def _claim_failure_verdict(error: ResourceError) -> Verdict:
    # In use or an empty pool can pass; quarantined, consumed or missing will not.
    transient = isinstance(error, PoolExhausted) or getattr(error, "code", "") in (ResourceState.IN_USE, "failed")
    category = FailureCategory.RETRYABLE if transient else FailureCategory.NON_RETRYABLE
    action = PatternAction.RETRY_SAME_RESOURCE if transient else PatternAction.DEAD_LETTER
    return Verdict(Classification(category, None, str(error)), action)


def begin_attempt(*, task_id: int, attempt_number: int, worker: str = "", rq_job_id: str = "") -> StartedAttempt | None:
    """Lock the task, make sure this delivery is the one due, claim the resource, record the attempt.
    Returns None when there is nothing to run (a duplicate or early delivery, a failed claim)."""
    with transaction.atomic():
        task = Task.objects.select_for_update().filter(pk=task_id).first()
        if task is None or task.state not in WAITING_STATES or task.attempt_count + 1 != attempt_number:
            return None  # delivered twice, or for an attempt that has already happened
        now = timezone.now()
        if task.next_run_at > now:
            _enqueue_after_commit(task)
            return None
        try:
            flow = get_flow(task.flow)
        except UnknownFlow as exc:
            _record_unrun_attempt(task, attempt_number, now, exc, Verdict(
                Classification(FailureCategory.NON_RETRYABLE, None, str(exc)), PatternAction.DEAD_LETTER))
            return None
        try:
            lease = _claim_for(task)
        except (ResourceUnavailable, PoolExhausted) as exc:
            _record_unrun_attempt(task, attempt_number, now, exc, _claim_failure_verdict(exc))
            return None
        attempt = Attempt(
            task=task, number=attempt_number, resource=lease, lease_token=lease.lease_token, worker=worker[:200],
            rq_job_id=rq_job_id, started_at=now, scheduled_for=task.next_run_at,
        )
        _record_start(attempt)
    resource_id, token = lease.pk, lease.lease_token
    context = FlowContext(
        task_id=task.pk, attempt=attempt_number, payload=task.payload, resource_key=lease.key,
        resource_attributes=lease.attributes, idempotency_key=f"{task.idempotency_key}:{attempt_number}",
        heartbeat=lambda: pool.extend_lease(resource=resource_id, lease_token=token),
    )
    lease_seconds = (lease.leased_until - timezone.now()).total_seconds()
    return StartedAttempt(attempt=attempt, context=context, flow=flow, lease_seconds=lease_seconds)


# Every attempt passes through here and through _succeed, so each is one statement (insert the
# attempt and move the task, in one round trip) rather than two ORM writes.
#
# The start's commit does not wait for its WAL flush (synchronous_commit off for this one
# transaction; about a fifth of a task's time, see README). What that risks: a PostgreSQL crash
# within a fraction of a second of a start forgets it, and the dispatcher runs that attempt again,
# which is what a worker crash does anyway (delivery is at least once). Nothing else is at risk:
# outcomes commit synchronously, and a flushed outcome implies its start was flushed before it.
_START_SQL = f"""
    WITH attempt AS (
        INSERT INTO {Attempt._meta.db_table}
            (task_id, number, resource_id, lease_token, worker, rq_job_id, started_at, scheduled_for, outcome,
             error_class, error_message, error_signature, category, action)
        VALUES (%(task)s, %(number)s, %(resource)s, %(token)s, %(worker)s, %(job)s, %(now)s, %(due)s, 'running',
                '', '', '', '', '')
        RETURNING id
    ), task AS (
        UPDATE {Task._meta.db_table}
        SET state = 'running', attempt_count = %(number)s, resource_id = %(resource)s, held_lease_token = %(token)s
        WHERE id = %(task)s
    ), relaxed AS (
        SELECT set_config('synchronous_commit', 'off', true)  -- for this transaction only
    )
    SELECT id FROM attempt, relaxed
"""
_SUCCESS_SQL = f"""
    WITH attempt AS (
        UPDATE {Attempt._meta.db_table} SET outcome = 'succeeded', finished_at = %(now)s, duration_ms = %(ms)s
        WHERE id = %(attempt)s AND outcome = 'running'
        RETURNING id
    )
    UPDATE {Task._meta.db_table} SET state = 'succeeded', finished_at = %(now)s, result = %(result)s::jsonb,
        held_lease_token = NULL
    WHERE id = %(task)s AND EXISTS (SELECT 1 FROM attempt)
    RETURNING id
"""


def _record_start(attempt: Attempt) -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(_START_SQL, {
            "task": attempt.task_id, "number": attempt.number, "resource": attempt.resource_id,
            "token": attempt.lease_token, "worker": attempt.worker, "job": attempt.rq_job_id,
            "now": attempt.started_at, "due": attempt.scheduled_for,
        })
        attempt.pk = cursor.fetchone()[0]
    attempt._state.adding = False


def _record_unrun_attempt(task: Task, number: int, now: datetime, error: Exception, verdict: Verdict) -> None:
    """An attempt that never reached its flow (the resource could not be had): it still counts."""
    attempt = Attempt.objects.create(
        task=task, number=number, started_at=now, scheduled_for=task.next_run_at, finished_at=now,
        outcome=AttemptOutcome.FAILED, duration_ms=0, **_error_fields(error, verdict),
    )
    task.attempt_count = number
    task.save(update_fields=["attempt_count"])
    _after_failure(task, attempt, verdict, error, now)


class WorkerLost(Exception):
    """What an abandoned attempt failed with: its worker died or hung and its lease ran out."""


def _close_failed(attempt: Attempt, *, outcome: str, error: BaseException, verdict: Verdict, now: datetime) -> None:
    """Write a failed or abandoned attempt's end and its error."""
    attempt.outcome, attempt.finished_at = outcome, now
    for field, value in _error_fields(error, verdict).items():
        setattr(attempt, field, value)
    attempt.save()


def _note_failure(task: Task, attempt: Attempt, verdict: Verdict) -> None:
    """The task's copy of its latest error, and the task.execution.failed event."""
    task.last_error = f"{attempt.error_class}: {attempt.error_message}"[:4000]
    task.last_error_signature, task.last_error_category = attempt.error_signature, verdict.category
    _emit(task, TaskEventKind.EXECUTION_FAILED, attempt_number=attempt.number, category=verdict.category,
          action=verdict.action, signature=attempt.error_signature)


def _error_fields(error: BaseException | str, verdict: Verdict) -> dict:
    error_class = type(error).__name__ if isinstance(error, BaseException) else "Error"
    message = str(error)[:4000]
    return {
        "error_class": error_class, "error_message": message, "error_signature": error_signature(error_class, message),
        "category": verdict.category, "action": verdict.action,
    }


# RQ's scheduler stores whole seconds (truncated) and looks once a second, so a retry's job may
# start up to a second before next_run_at. Waiting out that second here keeps lateness under a
# second; deferring through RQ again would add one to two more. Anything earlier is deferred.
MAX_EARLY_WAIT = 1.5


def _wait_out_early_wakeup(due: float | None) -> None:
    if due is not None:
        early = due - time.time()
        if 0 < early <= MAX_EARLY_WAIT:
            time.sleep(early)


def run_attempt(*, task_id: int, attempt_number: int, due: float | None = None, worker: str = "",
                rq_job_id: str = "") -> Attempt | None:
    """Run one attempt of a task: what the RQ job does. `due` is the scheduled time (a Unix
    timestamp) of a delayed wake-up, which may come up to a second early."""
    _wait_out_early_wakeup(due)
    started = begin_attempt(task_id=task_id, attempt_number=attempt_number, worker=worker, rq_job_id=rq_job_id)
    if started is None:
        return None
    began = time.monotonic()
    heartbeat = _Heartbeat(started.context.heartbeat, interval=started.lease_seconds / 3)
    heartbeat.start()
    try:
        result = started.flow(started.context)
    except Exception as exc:  # a flow's failure is data, whatever its type
        error, result = exc, None
    else:
        error, result = None, _storable(result)
    finally:
        heartbeat.stop()
    return finish_attempt(attempt=started.attempt, result=result, error=error, duration=time.monotonic() - began)


def _storable(result):
    """A flow's result as JSON can keep it. A result JSON cannot hold does not turn a success into
    a failure (a retry would repeat the flow's side effects): it is kept as its repr."""
    from django.core.serializers.json import DjangoJSONEncoder

    try:
        return json.loads(json.dumps(result, cls=DjangoJSONEncoder))
    except (TypeError, ValueError):
        log.warning("flow result %r is not JSON; keeping its repr", type(result))
        return {"repr": repr(result)[:2000]}


class _Heartbeat:
    """Extends the attempt's lease while its flow runs, so only a dead or hung worker's lease
    expires. Runs in a thread with its own database connection; dies with the worker."""

    def __init__(self, beat, *, interval: float):
        import threading

        self._beat, self._interval = beat, max(interval, 0.5)
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lease-heartbeat", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        from django.db import connection

        try:
            while not self._stopped.wait(self._interval):
                try:
                    self._beat()
                except LeaseMismatch:
                    return  # swept or released: nothing left to keep alive
                except Exception:
                    log.exception("lease heartbeat failed; trying again")
        finally:
            connection.close()


def finish_attempt(*, attempt: Attempt, result=None, error: BaseException | None = None, duration: float = 0.0) -> Attempt:
    """Record an attempt's outcome, release or hold its resource, and retry or end the task."""
    now = timezone.now()
    with transaction.atomic():
        # Lock order, here and in recover_lost_attempts: the attempt, then its task.
        if attempt.task.is_probe:
            return _finish_probe(attempt, result, error, now, duration)
        if error is None:
            return _succeed(attempt, result, now, duration)
        attempt = Attempt.objects.select_for_update().get(pk=attempt.pk)
        if attempt.outcome != AttemptOutcome.RUNNING:
            log.warning("%s finished after it was %s; its outcome is dropped", attempt, attempt.outcome)
            return attempt
        task = Task.objects.select_for_update().get(pk=attempt.task_id)
        attempt.duration_ms = int(duration * 1000)
        verdict = judge(task.policy, error)
        _close_failed(attempt, outcome=AttemptOutcome.FAILED, error=error, verdict=verdict, now=now)
        _after_failure(task, attempt, verdict, error, now)
    return attempt


def _finish_probe(attempt: Attempt, result, error, now: datetime, duration: float) -> Attempt:
    """A probe never retries: its outcome decides the resource's fate, then the task ends."""
    attempt = Attempt.objects.select_for_update().get(pk=attempt.pk)
    task = Task.objects.select_for_update().get(pk=attempt.task_id)
    if attempt.outcome != AttemptOutcome.RUNNING:
        return attempt
    attempt.finished_at, attempt.duration_ms = now, int(duration * 1000)
    try:
        pool.end_probe(resource=attempt.resource_id, lease_token=attempt.lease_token, succeeded=error is None,
                       error=error, actor=task.holder)
    except LeaseMismatch as exc:
        log.warning("probe %s ended without its lease: %s", attempt, exc)
    task.held_lease_token = None
    if error is None:
        attempt.outcome = AttemptOutcome.SUCCEEDED
        attempt.save()
        task.state, task.finished_at, task.result = TaskState.SUCCEEDED, now, result
        task.save(update_fields=["state", "finished_at", "result", "held_lease_token"])
        return attempt
    verdict = Verdict(Classification(FailureCategory.NON_RETRYABLE, None, str(error)), PatternAction.QUARANTINE)
    _close_failed(attempt, outcome=AttemptOutcome.FAILED, error=error, verdict=verdict, now=now)
    _note_failure(task, attempt, verdict)
    mark_dead(task, reason="probation probe failed; the resource stays quarantined", now=now)
    return attempt


def start_probes(*, now: datetime | None = None, limit: int = 100) -> list[Task]:
    """Start one probe task for every quarantined resource whose probation cooldown is over,
    with the flow, payload and policy of the last task that ran on it."""
    now = now or timezone.now()
    due = Resource.objects.filter(state=ResourceState.QUARANTINED, probe_after__lte=now).order_by("probe_after")[:limit]
    probes = []
    for resource in due:
        last = Task.objects.filter(attempts__resource=resource).order_by("-id").first()
        if last is None:
            continue
        try:
            probes.append(start_task(flow=last.flow, pool_name=resource.pool_id, payload=last.payload,
                                     policy=last.policy, created_by="probation", resource=resource, probe=True))
        except ResourceError as exc:
            log.info("no probe for resource %s: %s", resource.pk, exc)
    return probes


def _succeed(attempt: Attempt, result, now: datetime, duration: float) -> Attempt:
    from django.db import connection

    task = Task(pk=attempt.task_id)
    with connection.cursor() as cursor:
        # One statement: the attempt's row (locked first, by the uncorrelated EXISTS), then the task's.
        cursor.execute(_SUCCESS_SQL, {"attempt": attempt.pk, "task": task.pk, "now": now, "ms": int(duration * 1000),
                                      "result": json.dumps(result)})
        recorded = cursor.fetchone() is not None
    if not recorded:  # the dispatcher gave the attempt up as lost while the flow ran
        log.warning("%s finished after it was abandoned; its outcome is dropped", attempt)
        return Attempt.objects.get(pk=attempt.pk)
    try:
        pool.release(resource=attempt.resource_id, lease_token=attempt.lease_token, outcome=Outcome.SUCCESS,
                     actor=task.holder, details={"attempt": attempt.number})
    except LeaseMismatch as exc:
        log.warning("%s succeeded but its lease was gone: %s", attempt, exc)
    attempt.outcome, attempt.finished_at, attempt.duration_ms = AttemptOutcome.SUCCEEDED, now, int(duration * 1000)
    if attempt.number > 1:
        _emit(task, TaskEventKind.RETRY_SUCCEEDED, attempt_number=attempt.number, resource=attempt.resource_id)
    return attempt


def _after_failure(task: Task, attempt: Attempt, verdict: Verdict, error, now: datetime) -> None:
    """Decide what a failed attempt leads to: a retry (same or another resource) or a dead task."""
    policy = task.policy
    _note_failure(task, attempt, verdict)

    retryable = verdict.category == FailureCategory.RETRYABLE and verdict.action in (
        PatternAction.RETRY_SAME_RESOURCE, PatternAction.RETRY_OTHER_RESOURCE)
    delay = retry_delay(backoff=policy.backoff, attempt=attempt.number, initial=policy.initial_delay_seconds,
                        multiplier=policy.multiplier, maximum=policy.max_delay_seconds)
    next_run = now + timedelta(seconds=delay)
    why_dead = None
    if not retryable:
        why_dead = f"{verdict.category} failure ({verdict.action.replace('_', ' ')})"
    elif attempt.number >= policy.max_attempts:
        why_dead = f"all {policy.max_attempts} attempts failed"
    elif task.deadline_at and next_run > task.deadline_at:
        why_dead = f"a retry at {next_run:%H:%M:%S} would pass the deadline {task.deadline_at:%H:%M:%S}"
    same_resource = (
        why_dead is None and verdict.action == PatternAction.RETRY_SAME_RESOURCE and policy.same_resource_on_retry
    )

    if attempt.lease_token and attempt.outcome != AttemptOutcome.ABANDONED:
        _settle_resource(task, attempt, verdict, error, hold_until=next_run if same_resource else None)
    if why_dead is not None:
        mark_dead(task, reason=why_dead, now=now)
        return
    if same_resource:
        task.pinned_resource_id = attempt.resource_id or task.pinned_resource_id
    else:  # another resource, unless the task was strictly for one
        task.pinned_resource_id = task.requested_resource_id if task.strict else None
    if not same_resource:
        task.held_lease_token = None
    task.state, task.next_run_at = TaskState.RETRYING, next_run
    task.save(update_fields=["state", "next_run_at", "pinned_resource", "held_lease_token", "last_error",
                             "last_error_signature", "last_error_category", "attempt_count"])
    _emit(task, TaskEventKind.RETRY_SCHEDULED, attempt_number=attempt.number, delay_seconds=round(delay, 3),
          next_run_at=next_run.isoformat(), same_resource=same_resource, resource=task.pinned_resource_id)
    _enqueue_after_commit(task)


def _settle_resource(task: Task, attempt: Attempt, verdict: Verdict, error, *, hold_until: datetime | None) -> None:
    """Give the resource its share of the failure: held for the retry, failed, or quarantined."""
    classification = verdict.classification
    if verdict.action == PatternAction.QUARANTINE and classification.retryable:
        classification = Classification(FailureCategory.NON_RETRYABLE, classification.pattern, classification.text)
    elif verdict.action == PatternAction.DEAD_LETTER and not classification.retryable:
        # The task is at fault, not the resource: it goes back as failed, not quarantined.
        classification = Classification(FailureCategory.RETRYABLE, classification.pattern, classification.text)
    try:
        if hold_until is not None:
            lease_seconds = task.pool.lease_seconds
            pool.hold_after_failure(resource=attempt.resource_id, lease_token=attempt.lease_token, error=error,
                                    classification=classification, actor=task.holder,
                                    hold_until=hold_until + timedelta(seconds=lease_seconds))
        else:
            pool.release(resource=attempt.resource_id, lease_token=attempt.lease_token, outcome=Outcome.FAILURE,
                         error=error, classification=classification, actor=task.holder,
                         details={"attempt": attempt.number},
                         probation_seconds=task.policy.probation_cooldown_seconds if verdict.probation else None)
            task.held_lease_token = None
    except LeaseMismatch as exc:
        log.warning("%s failed and its lease was gone: %s", attempt, exc)
        task.held_lease_token = None


def mark_dead(task: Task, *, reason: str, now: datetime | None = None) -> Task:
    """End a task that will not be retried and emit task.dead (dead letters hang off this event)."""
    if task.held_lease_token:  # reserved or held for an attempt that will never come
        try:
            pool.release_unused(resource=task.resource_id, lease_token=task.held_lease_token, actor=task.holder,
                                reason=f"task dead: {reason}")
        except (LeaseMismatch, ResourceNotFound):
            pass  # swept already
    task.state, task.finished_at, task.held_lease_token = TaskState.DEAD, now or timezone.now(), None
    task.save(update_fields=["state", "finished_at", "held_lease_token", "last_error", "last_error_signature",
                             "last_error_category", "attempt_count"])
    _emit(task, TaskEventKind.DEAD, attempt_number=task.attempt_count, reason=reason,
          signature=task.last_error_signature, resource=task.resource_id)
    return task


# --- operator retry ---------------------------------------------------------------------


def retry_resource(*, resource: Resource | int, actor: str, flow: str | None = None, payload=None,
                   policy: RetryPolicy | str | None = None) -> Task:
    """Reset a failed resource and start a task on it in strict mode, in one transaction: between
    the reset and the job no one else can claim it. Flow and payload default to those of the last
    task that ran on the resource."""
    resource_id = resource.pk if isinstance(resource, Resource) else int(resource)
    with transaction.atomic():
        current = Resource.objects.select_for_update(of=("self",)).select_related("pool").filter(pk=resource_id).first()
        if current is None:
            raise ResourceUnavailable(f"no resource with id {resource_id}", code="missing", resource_id=resource_id)
        last = Task.objects.filter(attempts__resource=current).order_by("-id").first()
        if flow is None:
            if last is None:
                raise TaskError(f"no task has run on {current.pool.resource_noun} {current.key} yet: name the flow")
            flow = last.flow
            payload = last.payload if payload is None else payload
            policy = policy or last.policy
        if current.state in (ResourceState.FAILED, ResourceState.DONE):
            pool.reset(resource=current, actor=actor, reason="retry this resource")
        elif current.state != ResourceState.AVAILABLE:
            raise pool.describe_unavailability(current)
        return start_task(flow=flow, pool_name=current.pool, payload=payload, policy=policy, created_by=actor,
                          resource=current, strict=True, reserve=True)


# --- recovery: lost workers and lost Redis ----------------------------------------------


def recover_lost_attempts(*, now: datetime | None = None) -> list[Attempt]:
    """Sweep expired leases, then abandon every running attempt whose lease is gone (its worker
    died or hung) and retry its task as for a retryable failure."""
    now = now or timezone.now()
    pool.sweep_expired_leases(now=now)
    running = Attempt.objects.filter(outcome=AttemptOutcome.RUNNING, task__state=TaskState.RUNNING).select_related("resource")
    lost = [a.pk for a in running if a.resource is None or a.resource.lease_token != a.lease_token]
    abandoned = []
    for attempt_id in lost:
        with transaction.atomic():
            attempt = Attempt.objects.select_for_update().get(pk=attempt_id)
            if attempt.outcome != AttemptOutcome.RUNNING:
                continue
            task = Task.objects.select_for_update(of=("self",)).select_related("policy", "pool").get(pk=attempt.task_id)
            error = WorkerLost(ABANDONED_REASON)
            verdict = Verdict(Classification(FailureCategory.RETRYABLE, None, ABANDONED_REASON),
                              PatternAction.RETRY_SAME_RESOURCE)
            _close_failed(attempt, outcome=AttemptOutcome.ABANDONED, error=error, verdict=verdict, now=now)
            task.held_lease_token = None
            if task.is_probe:  # probes never retry; the sweep put the resource back in quarantine
                _note_failure(task, attempt, verdict)
                mark_dead(task, reason="probation probe lost with its worker", now=now)
            else:
                _after_failure(task, attempt, verdict, error, now)
            abandoned.append(attempt)
    return abandoned


def run_dispatcher() -> dict[str, int]:
    """One dispatcher pass (the periodic job and `manage.py dispatch_tasks`): recover attempts
    whose workers died, start due probation probes, then re-enqueue waiting tasks Redis lost."""
    abandoned = recover_lost_attempts()
    probes = start_probes()
    enqueued = dispatch_waiting()
    return {"abandoned": len(abandoned), "probes": len(probes), "enqueued": len(enqueued)}


_DEAD_JOB_STATUSES = {b"finished", b"failed", b"stopped", b"canceled"}


def dispatch_waiting(*, limit: int = 1000) -> list[int]:
    """Enqueue again every waiting task that has no live RQ job (Redis flushed, failed over, or
    down when the task started). Returns the ids of the tasks it enqueued."""
    import django_rq

    waiting = list(
        Task.objects.filter(state__in=WAITING_STATES).order_by("next_run_at").values_list(
            "pk", "attempt_count", "next_run_at", "rq_job_id")[:limit]
    )
    if not waiting:
        return []
    connection = django_rq.get_connection(FLOW_QUEUE)
    with connection.pipeline() as pipe:
        for _, _, _, job_id in waiting:
            pipe.hget(f"rq:job:{job_id}", "status")
        statuses = pipe.execute()
    enqueued = []
    for (task_id, attempts, next_run_at, job_id), status in zip(waiting, statuses):
        if job_id and status is not None and status not in _DEAD_JOB_STATUSES:
            continue
        if enqueue_attempt(task_id=task_id, attempt_number=attempts + 1, at=next_run_at):
            enqueued.append(task_id)
    return enqueued


# --- automatic batch scheduling ---------------------------------------------------------


def _recent_failed_candidates(config: BatchConfig, now: datetime) -> list[Resource]:
    """Recently failed, retryable resources of the pool, newest failure first, whose last failure
    matches the config's patterns (any, when it has none): up to a few times what a tick needs,
    so that those taken meanwhile can be skipped."""
    from resources.classification import compile_patterns

    wanted = config.tasks_per_tick * 5
    recent = Resource.objects.filter(
        pool_id=config.pool_id, state=ResourceState.FAILED, last_failure_category=FailureCategory.RETRYABLE,
        last_failure_at__gte=now - timedelta(seconds=config.recent_window_seconds),
    ).order_by("-last_failure_at")
    patterns = compile_patterns(tuple(config.retryable_error_patterns or ()))
    if not patterns:
        return list(recent[:wanted])
    # Python's regexes, as the admin validated them; the window bounds the scan.
    matching = []
    for resource in recent.iterator(chunk_size=500):
        if any(p.search(resource.last_failure_reason) for p in patterns):
            matching.append(resource)
            if len(matching) >= wanted:
                break
    return matching


def run_batch(*, config: BatchConfig, now: datetime | None = None) -> list[Task]:
    """One tick of a batch config: start up to tasks_per_tick tasks, each on a resource claimed
    now. With retry_failed_first, recently failed retryable resources go first; quarantined ones
    never."""
    now = now or timezone.now()
    started: list[Task] = []
    candidates = _recent_failed_candidates(config, now) if config.retry_failed_first else []
    common = {"flow": config.flow, "pool_name": config.pool_id, "payload": config.payload, "policy": config.policy,
              "created_by": f"batch {config.name}"}
    while len(started) < config.tasks_per_tick and candidates:
        candidate = candidates.pop(0)
        try:
            with transaction.atomic():
                started.append(start_task(resource=candidate, reserve=True, **common))
        except ResourceUnavailable:
            continue  # taken since we looked
    while len(started) < config.tasks_per_tick:
        try:
            with transaction.atomic():
                started.append(start_task(claim_now=True, **common))
        except PoolExhausted:
            break
    BatchConfig.objects.filter(pk=config.pk).update(last_tick_at=now)
    return started


def run_batches(*, now: datetime | None = None) -> dict[str, int]:
    """Tick every enabled batch config; returns how many tasks each started."""
    return {config.name: len(run_batch(config=config, now=now))
            for config in BatchConfig.objects.filter(enabled=True).select_related("policy")}


# --- retry policies ---------------------------------------------------------------------

POLICY_FIELDS = ("description", "max_attempts", "backoff", "initial_delay_seconds", "multiplier", "max_delay_seconds",
                 "retryable_error_patterns", "non_retryable_error_patterns", "same_resource_on_retry",
                 "deadline_seconds", "probation_cooldown_seconds")


def policy_snapshot(policy: RetryPolicy) -> dict:
    return {field: getattr(policy, field) for field in POLICY_FIELDS}


def save_retry_policy(*, data: dict, actor: str) -> RetryPolicy:
    """Create or change one policy from validated data, recording who changed what."""
    from scheduling.models import RetryPolicyChange

    with transaction.atomic():
        policy = RetryPolicy.objects.select_for_update().filter(name=data["name"]).first()
        before = policy_snapshot(policy) if policy else {}
        if policy is None:
            policy = RetryPolicy(name=data["name"])
        for field in POLICY_FIELDS:
            setattr(policy, field, data[field])
        after = policy_snapshot(policy)
        if before == after:
            return policy
        policy.save()
        RetryPolicyChange.objects.create(policy=policy, changed_by=actor[:200], before=before, after=after)
    return policy


def load_retry_policies(*, text: str, source: str, actor: str) -> list[RetryPolicy]:
    """Load every policy of a YAML document, all or none: a bad field anywhere loads nothing."""
    import yaml

    from scheduling.policies import PolicyError, clean_policy

    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise PolicyError(f"{source}: not valid YAML: {exc}") from None
    if not isinstance(document, dict) or not isinstance(document.get("policies"), list):
        raise PolicyError(f"{source}: expected a mapping with a 'policies' list")
    cleaned, names = [], set()
    for n, entry in enumerate(document["policies"]):
        label = f"policies[{n}]" + (f" ({entry['name']})" if isinstance(entry, dict) and "name" in entry else "")
        try:
            data = clean_policy(entry)
        except PolicyError as exc:
            raise PolicyError(f"{source}: {label}: {exc}") from None
        if data["name"] in names:
            raise PolicyError(f"{source}: {label}: policy name {data['name']!r} appears twice")
        names.add(data["name"])
        cleaned.append(data)
    with transaction.atomic():
        return [save_retry_policy(data=data, actor=actor) for data in cleaned]
