"""The dispatcher: what dead workers and a lost Redis left behind, brought back from the database."""

from datetime import datetime

from django.db import transaction
from django.utils import timezone

from resources import services as pool
from resources.choices import FailureCategory
from resources.classification import Classification
from scheduling.choices import WAITING_STATES, AttemptOutcome, PatternAction, TaskState
from scheduling.models import Attempt, Task
from scheduling.policies import Verdict
from scheduling.queueing import FLOW_QUEUE, enqueue_attempt
from scheduling.services.failures import (
    ABANDONED_REASON,
    WorkerLost,
    after_failure,
    close_failed,
    end_failed,
)
from scheduling.services.probes import start_probes


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
            close_failed(attempt, outcome=AttemptOutcome.ABANDONED, error=error, verdict=verdict, now=now)
            task.held_lease_token = None
            if task.is_probe:  # probes never retry; the sweep put the resource back in quarantine
                end_failed(task, attempt, verdict, reason="probation probe lost with its worker", now=now)
            else:
                after_failure(task, attempt, verdict, error, now)
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
