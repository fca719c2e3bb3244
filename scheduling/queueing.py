"""Wake-ups on RQ: a task's attempt is put on a queue once the transaction that made it due
commits. Redis only carries these; the database decides what runs (see the dispatcher)."""

import logging
import uuid
from datetime import datetime, timedelta

import django_rq
import structlog
from django.db import transaction
from django.utils import timezone
from redis.exceptions import RedisError
from rq import Queue
from rq.job import JobStatus

from scheduling.jobs import run_attempt_job
from scheduling.models import Task

log = logging.getLogger(__name__)

FLOW_QUEUE = "flows"
# Retries have a queue of their own, taken before new work: in one FIFO queue a due retry would
# wait behind every task started before it came due (a burst of new tasks made retries seconds
# late). Its own queue also keeps that order for retries RQ's scheduler moves when due, which it
# puts at the back of their queue.
RETRY_QUEUE = "retries"
# The queues a flow worker takes from, in this order (`manage.py up`, the tests' burst worker).
WORKER_QUEUES = (RETRY_QUEUE, FLOW_QUEUE, "default")

# How often the flow workers' scheduler (retryops.worker.DueScheduler) looks for wake-ups that have
# come due: a due retry waits at most this long for it, plus a worker's pick-up. RQ's own looks
# once a second, and keeps whole seconds, so its wake-ups came up to a second early or late.
SCHEDULER_POLL = 0.1
# ...and moves a wake-up this long before its due time, about what a work horse's start costs (a
# fork, a new database connection): the horse spends it before the due time instead of after,
# and the runner waits out what is left (runner.MAX_EARLY_WAIT). The attempt never starts before
# next_run_at by PostgreSQL's clock (begin_attempt).
SCHEDULER_LEAD = 0.1

# How long RQ keeps a finished wake-up's job and return value (the outcome itself lives in the
# Attempt row). Not 0: RQ deletes a job with result_ttl=0 at once, in nine more Redis round trips
# than letting it expire (it reads the job's executions twice, outside its pipeline), which was a
# third of a no-op task's Redis traffic. A finished job counts as no job for the dispatcher
# (recovery._LIVE_JOB_STATUSES), as a deleted one did.
RESULT_TTL = 60

# A wake-up due sooner than this goes on the queue at once, and the runner waits out the rest
# (see runner.MAX_EARLY_WAIT), on time to the millisecond; through the scheduler it would come up
# to a poll and a worker's pick-up late.
IMMEDIATE_WITHIN = timedelta(milliseconds=500)


def queue_for(attempt_number: int) -> Queue:
    """The queue an attempt's wake-up goes on: first attempts on the flow queue, retries on theirs."""
    return django_rq.get_queue(RETRY_QUEUE if attempt_number > 1 else FLOW_QUEUE)


def enqueue_after_commit(task: Task) -> None:
    task_id, number, at = task.pk, task.attempt_count + 1, task.next_run_at
    transaction.on_commit(lambda: enqueue_attempt(task_id=task_id, attempt_number=number, at=at), robust=True)

def enqueue_attempt(*, task_id: int, attempt_number: int, at: datetime | None = None,
                    delay: float | None = None) -> str | None:
    """Put the wake-up for a task's attempt on the queue, at `at` or `delay` seconds from now
    (what the runner uses when the database's clock says it came early: relative, so a host whose
    clock runs ahead wakes it on time). A Redis that does not answer is logged, not raised: the
    task is safe in the database and the dispatcher enqueues it later."""
    if delay is not None:
        at = timezone.now() + timedelta(seconds=delay)

    job_id = f"task-{task_id}-{attempt_number}-{uuid.uuid4().hex[:8]}"
    # The request (or job run) that made the attempt due, so the worker's log lines of the attempt
    # carry its id; an attempt run in a worker hands it on to the retries it schedules.
    request_id = structlog.contextvars.get_contextvars().get("request_id") or ""
    options = {"job_id": job_id, "result_ttl": RESULT_TTL, "meta": {"request_id": request_id}}
    # Every wake-up carries its due time, so one that arrives early waits instead of deferring
    # through RQ again (a 0.4 s retry once took a dozen deliveries).
    due = at.timestamp() if at is not None else None
    try:
        queue = queue_for(attempt_number)
        if at is not None and at > timezone.now() + IMMEDIATE_WITHIN:
            _schedule(queue, due, run_attempt_job, task_id, attempt_number, due, **options)
        else:
            queue.enqueue(run_attempt_job, task_id, attempt_number, due, **options)
    except RedisError as exc:
        log.warning("task %s attempt %s not enqueued (%s); the dispatcher will", task_id, attempt_number, exc,
                    extra={"task_id": task_id, "attempt": attempt_number})
        return None
    log.info("task %s attempt %s enqueued on %s", task_id, attempt_number, queue.name,
             extra={"task_id": task_id, "attempt": attempt_number, "queue": queue.name,
                                                              "due": at.isoformat() if at else None})
    Task.objects.filter(pk=task_id, attempt_count=attempt_number - 1).update(rq_job_id=job_id)
    return job_id


def _schedule(queue: Queue, due: float, func, *args, job_id: str, **options) -> None:
    """What RQ's enqueue_at does, with the due time kept to the fraction of a second (the
    scheduled registry's score): RQ's scores are whole seconds, truncated, so its scheduler moved a
    wake-up up to a second early. DueScheduler moves it once this host's clock reaches `due`;
    RQ's own scheduler, which compares whole seconds, up to a second late, never early. One
    pipeline: RQ's enqueue_at adds the registry entry before the job exists, and a scheduler
    that looked in between dropped it."""
    job = queue.create_job(func, args=args, job_id=job_id, status=JobStatus.SCHEDULED, **options)
    with queue.connection.pipeline() as pipe:
        pipe.sadd(queue.redis_queues_keys, queue.key)
        job.save(pipeline=pipe)
        pipe.zadd(queue.scheduled_job_registry.key, {job.id: due})
        pipe.execute()
