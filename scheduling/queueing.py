"""Wake-ups on RQ: a task's attempt is put on the flow queue once the transaction that made it
due commits. Redis only carries these; the database decides what runs (see the dispatcher)."""

import logging
import uuid
from datetime import datetime, timedelta

import django_rq
from django.db import transaction
from django.utils import timezone
from redis.exceptions import RedisError

from scheduling.jobs import run_attempt_job
from scheduling.models import Task

log = logging.getLogger(__name__)

FLOW_QUEUE = "flows"


def enqueue_after_commit(task: Task) -> None:
    task_id, number, at = task.pk, task.attempt_count + 1, task.next_run_at
    transaction.on_commit(lambda: enqueue_attempt(task_id=task_id, attempt_number=number, at=at), robust=True)

def enqueue_attempt(*, task_id: int, attempt_number: int, at: datetime | None = None) -> str | None:
    """Put the wake-up for a task's attempt on the queue. A Redis that does not answer is logged,
    not raised: the task is safe in the database and the dispatcher enqueues it later."""

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
