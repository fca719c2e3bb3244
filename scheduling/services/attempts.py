"""An attempt's start (lock, claim, record) and its end (record, release or hold, retry or end)."""

import json
import logging
from dataclasses import dataclass
from datetime import datetime

from django.db import connection, transaction
from django.utils import timezone

from resources import services as pool
from resources.choices import FailureCategory, Outcome
from resources.classification import Classification
from resources.errors import LeaseMismatch, PoolExhausted, ResourceUnavailable
from retryops.masking import mask_secrets
from scheduling.choices import (
    WAITING_STATES,
    AttemptOutcome,
    PatternAction,
    TaskEventKind,
)
from scheduling.flows import FlowContext, UnknownFlow, get_flow
from scheduling.models import Attempt, Task
from scheduling.policies import Verdict, judge
from scheduling.queueing import enqueue_after_commit
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


def begin_attempt(*, task_id: int, attempt_number: int, worker: str = "", rq_job_id: str = "") -> StartedAttempt | None:
    """Lock the task, make sure this delivery is the one due, claim the resource, record the attempt.
    Returns None when there is nothing to run (a duplicate or early delivery, a failed claim)."""
    with transaction.atomic():
        task = Task.objects.select_for_update().filter(pk=task_id).first()
        if task is None or task.state not in WAITING_STATES or task.attempt_count + 1 != attempt_number:
            return None  # delivered twice, or for an attempt that has already happened
        now = timezone.now()
        if task.next_run_at > now:
            enqueue_after_commit(task)
            return None
        try:
            flow = get_flow(task.flow)
        except UnknownFlow as exc:
            record_unrun_attempt(task, attempt_number, now, exc, Verdict(
                Classification(FailureCategory.NON_RETRYABLE, None, str(exc)), PatternAction.DEAD_LETTER))
            return None
        try:
            lease = claim_for(task)
        except (ResourceUnavailable, PoolExhausted) as exc:
            record_unrun_attempt(task, attempt_number, now, exc, claim_failure_verdict(exc))
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
# attempt and move the task, in one round trip) rather than two ORM writes. A success clears the
# task's copy of its latest error (an earlier attempt's); the attempts keep their own.
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
        held_lease_token = NULL, last_error = '', last_error_signature = '', last_error_category = ''
    WHERE id = %(task)s AND EXISTS (SELECT 1 FROM attempt)
    RETURNING id
"""


def _record_start(attempt: Attempt) -> None:

    with connection.cursor() as cursor:
        cursor.execute(_START_SQL, {
            "task": attempt.task_id, "number": attempt.number, "resource": attempt.resource_id,
            "token": attempt.lease_token, "worker": attempt.worker, "job": attempt.rq_job_id,
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
    now = timezone.now()
    result = mask_secrets(result)
    with transaction.atomic():
        # Lock order, here and in recover_lost_attempts: the attempt, then its task.
        if attempt.task.is_probe:
            return finish_probe(attempt, result, error, now, duration)
        if error is None:
            return _succeed(attempt, result, now, duration)
        attempt = Attempt.objects.select_for_update().get(pk=attempt.pk)
        if attempt.outcome != AttemptOutcome.RUNNING:
            log.warning("%s finished after it was %s; its outcome is dropped", attempt, attempt.outcome)
            return attempt
        task = Task.objects.select_for_update().get(pk=attempt.task_id)
        attempt.duration_ms = int(duration * 1000)
        verdict = judge(task.policy, error if raised is None else raised)
        close_failed(attempt, outcome=AttemptOutcome.FAILED, error=error, verdict=verdict, now=now)
        after_failure(task, attempt, verdict, error, now)
    return attempt


def _succeed(attempt: Attempt, result, now: datetime, duration: float) -> Attempt:

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
        emit(task, TaskEventKind.RETRY_SUCCEEDED, attempt_number=attempt.number, resource=attempt.resource_id)
    return attempt
