"""What a failed attempt leads to: its record, the resource's share, a retry or a dead task."""

import logging
from datetime import datetime, timedelta

from django.utils import timezone

import resources.services
from resources.choices import FailureCategory, Outcome
from resources.classification import Classification
from resources.errors import LeaseMismatch, ResourceNotFound
from resources.signatures import error_signature
from retryops import flags
from retryops.jsonsafe import clean_text
from scheduling.choices import AttemptOutcome, PatternAction, TaskEventKind, TaskState
from scheduling.models import Attempt, Task
from scheduling.policies import Verdict, retry_delay
from scheduling.queueing import enqueue_after_commit
from scheduling.services.events import emit

log = logging.getLogger(__name__)


ABANDONED_REASON = "worker lost: its lease expired before the attempt finished"


class WorkerLost(Exception):
    """What an abandoned attempt failed with: its worker died or hung and its lease ran out."""


def close_failed(attempt: Attempt, *, outcome: str, error: BaseException, verdict: Verdict, now: datetime) -> None:
    """Write a failed or abandoned attempt's end and its error."""
    attempt.outcome, attempt.finished_at = outcome, now
    for field, value in error_fields(error, verdict).items():
        setattr(attempt, field, value)
    attempt.save()


def record_failure(task: Task, attempt: Attempt, verdict: Verdict, *, lease_gone: bool = False) -> None:
    """The task's copy of its latest error and the task.execution.failed event. With `lease_gone`
    (swept, given back, or never granted), the task forgets the lease it held."""
    task.last_error = f"{attempt.error_class}: {attempt.error_message}"[:4000]
    task.last_error_signature, task.last_error_category = attempt.error_signature, verdict.category
    if lease_gone:
        task.held_lease_token = None
    emit(task, TaskEventKind.EXECUTION_FAILED, attempt_number=attempt.number, category=verdict.category,
         action=verdict.action, signature=attempt.error_signature)


def end_failed(task: Task, attempt: Attempt, verdict: Verdict, *, reason: str, now: datetime) -> Task:
    """A failed attempt that ends its task without a retry (a probe's): record the failure, drop
    the lease, and the task is dead."""
    record_failure(task, attempt, verdict, lease_gone=True)
    return _mark_dead(task, reason=reason, now=now)


def error_fields(error: BaseException | str, verdict: Verdict) -> dict:
    error_class = type(error).__name__ if isinstance(error, BaseException) else "Error"
    message = clean_text(str(error))[:4000]  # a NUL (from upstream JSON) would fail the write
    return {
        "error_class": error_class, "error_message": message, "error_signature": error_signature(error_class, message),
        "category": verdict.category, "action": verdict.action,
    }


def after_failure(task: Task, attempt: Attempt, verdict: Verdict, error, now: datetime) -> None:
    """Decide what a failed attempt leads to: a retry (same or another resource) or a dead task."""
    policy = task.policy
    record_failure(task, attempt, verdict)

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
    elif not flags.enabled(flags.TASK_RETRY_QUEUE):
        why_dead = f"retry queue off (flag {flags.TASK_RETRY_QUEUE})"
    same_resource = (
        why_dead is None and verdict.action == PatternAction.RETRY_SAME_RESOURCE and policy.same_resource_on_retry
    )

    if attempt.lease_token and attempt.outcome != AttemptOutcome.ABANDONED:
        _settle_resource(task, attempt, verdict, error, hold_until=next_run if same_resource else None)
    if why_dead is not None:
        _mark_dead(task, reason=why_dead, now=now)
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
    emit(task, TaskEventKind.RETRY_SCHEDULED, attempt_number=attempt.number, delay_seconds=round(delay, 3),
          next_run_at=next_run.isoformat(), same_resource=same_resource, resource=task.pinned_resource_id)
    enqueue_after_commit(task)


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
            resources.services.hold_after_failure(resource=attempt.resource_id, lease_token=attempt.lease_token,
                                                  error=error, classification=classification, actor=task.holder,
                                                  hold_until=hold_until + timedelta(seconds=lease_seconds))
        else:
            probation = task.policy.probation_cooldown_seconds if verdict.probation else None
            resources.services.release(resource=attempt.resource_id, lease_token=attempt.lease_token,
                                       outcome=Outcome.FAILURE, error=error, classification=classification,
                                       actor=task.holder, details={"attempt": attempt.number},
                                       probation_seconds=probation)
            task.held_lease_token = None
    except LeaseMismatch as exc:
        log.warning("%s failed and its lease was gone: %s", attempt, exc)
        task.held_lease_token = None


def _mark_dead(task: Task, *, reason: str, now: datetime | None = None) -> Task:
    """End a task that will not be retried and emit task.dead. Dead and not collected, it is in the
    queue the dead-letter step takes (claim_dead_tasks). The last step of after_failure and
    end_failed; the caller holds the task's lock."""
    if task.held_lease_token:  # reserved or held for an attempt that will never come
        try:
            resources.services.release_unused(resource=task.resource_id, lease_token=task.held_lease_token,
                                              actor=task.holder, reason=f"task dead: {reason}")
        except (LeaseMismatch, ResourceNotFound):
            pass  # swept already
    task.state, task.finished_at, task.held_lease_token = TaskState.DEAD, now or timezone.now(), None
    task.save(update_fields=["state", "finished_at", "held_lease_token", "last_error", "last_error_signature",
                             "last_error_category", "attempt_count"])
    emit(task, TaskEventKind.DEAD, attempt_number=task.attempt_count, reason=reason,
          signature=task.last_error_signature, resource=task.resource_id)
    return task
