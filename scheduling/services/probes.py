"""Probation: one probe task for a quarantined resource whose cooldown is over, and its outcome."""

import logging
from datetime import datetime

from django.db import transaction

import resources.services
from resources.choices import FailureCategory
from resources.classification import Classification
from resources.errors import LeaseMismatch, ResourceNotFound
from resources.selectors import due_for_probe
from retryops.errors import DomainError
from retryops.jsonsafe import clean_text
from scheduling.choices import AttemptOutcome, PatternAction, TaskState
from scheduling.models import Attempt, Task
from scheduling.policies import Verdict
from scheduling.selectors import last_task_on
from scheduling.services.failures import close_failed, end_failed
from scheduling.services.operator_retry import instance_to_run_again
from scheduling.services.tasks import start_probe

log = logging.getLogger(__name__)


def finish_probe(attempt: Attempt, result, error, now: datetime, duration: float) -> Attempt:
    """A probe never retries: its outcome decides the resource's fate, then the task ends."""
    attempt = Attempt.objects.select_for_update().get(pk=attempt.pk)
    task = Task.objects.select_for_update().get(pk=attempt.task_id)
    if attempt.outcome != AttemptOutcome.RUNNING:
        return attempt
    attempt.finished_at, attempt.duration_ms = now, int(duration * 1000)
    try:
        resources.services.end_probe(resource=attempt.resource_id, lease_token=attempt.lease_token,
                                     succeeded=error is None, error=error, actor=task.holder)
    except (LeaseMismatch, ResourceNotFound) as exc:
        log.warning("probe %s ended without its lease: %s", attempt, exc)
    task.held_lease_token = None
    if error is None:
        attempt.outcome = AttemptOutcome.SUCCEEDED
        attempt.save()
        task.state, task.finished_at, task.result = TaskState.SUCCEEDED, now, result
        task.last_error, task.last_error_signature, task.last_error_category = "", "", ""
        task.save(update_fields=["state", "finished_at", "result", "held_lease_token", "last_error",
                                 "last_error_signature", "last_error_category"])
        return attempt
    verdict = Verdict(Classification(FailureCategory.NON_RETRYABLE, None, str(error)), PatternAction.QUARANTINE)
    close_failed(attempt, outcome=AttemptOutcome.FAILED, error=error, verdict=verdict, now=now)
    end_failed(task, attempt, verdict, reason="probation probe failed; the resource stays quarantined", now=now)
    return attempt


def start_probes(*, now: datetime | None = None, limit: int = 100) -> list[Task]:
    """Start one probe task for every quarantined resource whose probation cooldown is over,
    with the flow, payload and policy of the last task that ran on it, as a run of that task's
    business instance (Task.first_run). A resource whose probe cannot start is postponed."""
    probes = []
    for resource in due_for_probe(now=now, limit=limit):
        last = last_task_on(resource)
        try:
            if last is None:
                raise LookupError("no task has run on it to repeat as its probe")
            with transaction.atomic():
                # Lock order as a retry's (resource, then the instance's first task), or a probe
                # and a strict retry of the same resource deadlock.
                resources.services.lock_resource(resource.pk)
                # The probe runs the last task's business instance again: only while no run of it
                # is live or has succeeded (an operator's retry of it on another resource).
                first_run = instance_to_run_again(last, f"{resource.pool.resource_noun} {resource.key}")
                probes.append(start_probe(resource=resource, last=last, first_run=first_run))
        except (DomainError, LookupError) as exc:  # taken meanwhile, its flow or policy gone
            log.warning("no probe for resource %s (last task %s): %s", resource.pk, last and last.pk, exc)
            _postpone(resource, f"no probe could start: {exc}")
        except Exception as exc:  # one bad row must not stop the rest
            log.exception("no probe for resource %s (last task %s)", resource.pk, last and last.pk)
            _postpone(resource, f"no probe could start: {type(exc).__name__}: {exc}")
    return probes


def _postpone(resource, reason: str) -> None:
    """Mark the row: left due, a probe that cannot start stays first in line on every pass, and
    `limit` of them keep every other quarantined resource from its probe."""
    try:
        resources.services.postpone_probe(resource=resource.pk, actor="probation", reason=clean_text(reason))
    except Exception:  # one bad row must not stop the rest
        log.exception("could not postpone the probe of resource %s", resource.pk)
