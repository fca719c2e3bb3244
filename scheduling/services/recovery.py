"""The dispatcher: what dead workers and a lost Redis left behind, brought back from the database."""

import logging
import time
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Q
from django.db.models.functions import Now
from django.utils import timezone
from rq import Queue
from rq.exceptions import NoSuchJobError
from rq.job import Job, JobStatus
from rq.utils import as_text

import resources.services
from resources.choices import FailureCategory, Outcome
from resources.classification import Classification
from resources.errors import LeaseMismatch, ResourceNotFound
from retryops.errors import BadInput
from retryops.inputs import whole_number
from retryops.jsonsafe import clean_text
from scheduling.choices import WAITING_STATES, AttemptOutcome, PatternAction

from scheduling.models import Attempt, Task
from scheduling.policies import Verdict
from scheduling.queueing import FLOW_QUEUE, enqueue_attempt
from scheduling.selectors import lost_attempts
from scheduling.services.failures import (
    ABANDONED_REASON,
    WorkerLost,
    after_failure,
    close_failed,
    end_failed,
)
from scheduling.services.probes import start_probes

log = logging.getLogger(__name__)


# How long one dispatcher step may go on before it leaves the rest for the next pass, so that one
# slow step (thousands of lost attempts after an outage) cannot hold up the dispatcher's next
# pass. A row locked by someone else is skipped, not waited for (SKIP LOCKED, lock_timeout).
STEP_BUDGET = 10.0


def recover_lost_attempts(*, now: datetime | None = None, failed: list[int] | None = None) -> list[Attempt]:
    """Sweep expired leases, then abandon every running attempt whose lease is gone (its worker
    died or hung) and retry its task as for a retryable failure. An attempt that cannot be
    recovered is logged, noted in its task's last_error and left for the next pass; its task id
    is appended to `failed`, and the others are still recovered. `now` is a test's stand-in for
    a later time (see sweep_expired_leases); PostgreSQL's clock decides otherwise."""
    resources.services.sweep_expired_leases(now=now)
    lost = [(a.pk, a.task_id) for a in lost_attempts()]
    abandoned, deadline = [], time.monotonic() + STEP_BUDGET
    for attempt_id, task_id in lost:
        if time.monotonic() > deadline:
            log.warning("dispatcher: %s lost attempts left for the next pass (step budget %s s spent)",
                        len(lost) - len(abandoned), STEP_BUDGET)
            break
        try:
            attempt = _abandon(attempt_id)
        except Exception as exc:  # one bad row (a policy whose numbers overflow, ...) must not stop the rest
            log.exception("dispatcher: could not recover lost attempt %s of task %s", attempt_id, task_id)
            _note_dispatcher_error(task_id, f"dispatcher could not recover its lost attempt: {type(exc).__name__}: {exc}")
            if failed is not None:
                failed.append(task_id)
            continue
        if attempt is not None:
            abandoned.append(attempt)
    return abandoned


def abandon_stopped_attempt(*, task_id: int, attempt_number: int, worker: str, rq_job_id: str,
                            reason: str) -> Attempt | None:
    """Give up a running attempt whose execution is known to have stopped (its worker killed its
    work horse, or saw it die, and reaped it), and its resource back as a retryable failure, at
    once: nothing can act under its lease any more, so there is no need to wait for it to run out.
    None if the attempt is not running (it recorded its outcome, or was given up already), or if
    that horse did not start it (`worker`, `rq_job_id`): a duplicate wake-up's horse that dies
    before it found the attempt started elsewhere leaves the attempt another horse runs alone."""
    attempt_id = Attempt.objects.filter(task_id=task_id, number=attempt_number, worker=worker[:200],
                                        rq_job_id=rq_job_id, outcome=AttemptOutcome.RUNNING,
                                        ).values_list("pk", flat=True).first()
    return None if attempt_id is None else _abandon(attempt_id, reason=reason, stopped=True)


def _abandon(attempt_id: int, *, reason: str = ABANDONED_REASON, stopped: bool = False) -> Attempt | None:
    with transaction.atomic():
        # SKIP LOCKED: an attempt locked by its own worker is being finished; the next pass sees.
        attempt = Attempt.objects.select_for_update(skip_locked=not stopped).annotate(
            db_now=Now()).filter(pk=attempt_id).first()
        if attempt is None or attempt.outcome != AttemptOutcome.RUNNING:
            return None
        now = attempt.db_now
        task = Task.objects.select_for_update(of=("self",)).select_related("policy", "pool").get(pk=attempt.task_id)
        error = WorkerLost(reason)
        verdict = Verdict(Classification(FailureCategory.RETRYABLE, None, reason), PatternAction.RETRY_SAME_RESOURCE)
        if stopped and attempt.lease_token and not task.is_probe:  # a probe's lease goes back to quarantine by the sweep
            try:
                resources.services.release(resource=attempt.resource_id, lease_token=attempt.lease_token,
                                           outcome=Outcome.FAILURE, error=error,
                                           classification=verdict.classification, actor=task.holder,
                                           details={"attempt": attempt.number, "stopped": True})
            except (LeaseMismatch, ResourceNotFound):
                pass  # swept meanwhile
        close_failed(attempt, outcome=AttemptOutcome.ABANDONED, error=error, verdict=verdict, now=now)
        task.held_lease_token = None
        if task.is_probe:  # probes never retry; the sweep put the resource back in quarantine
            end_failed(task, attempt, verdict, reason="probation probe lost with its worker", now=now)
        else:
            after_failure(task, attempt, verdict, error, now)
    return attempt


def _note_dispatcher_error(task_id: int, message: str) -> None:
    """Say on the task's row why the dispatcher keeps skipping it, for the operator who looks."""
    try:
        Task.objects.filter(pk=task_id).update(last_error=clean_text(message)[:4000])
    except Exception:
        log.exception("dispatcher: could not note the error on task %s", task_id)


def run_dispatcher() -> dict:
    """One dispatcher pass (the periodic job and `manage.py dispatch_tasks`): recover attempts
    whose workers died, start due probation probes, then re-enqueue waiting tasks Redis lost.
    Each step runs whatever the one before did: a step that raises is logged and named in
    `failed_steps`, and rows that failed alone are counted in `failed_rows`."""
    failed_rows: list[int] = []
    failed_steps: list[str] = []

    def step(name, call):
        try:
            return call()
        except Exception:
            log.exception("dispatcher: the %s step failed; going on with the next", name)
            failed_steps.append(name)
            return []

    abandoned = step("recovery", lambda: recover_lost_attempts(failed=failed_rows))
    probes = step("probes", start_probes)
    enqueued = step("dispatch", dispatch_waiting)
    return {"abandoned": len(abandoned), "probes": len(probes), "enqueued": len(enqueued),
            "failed_rows": len(failed_rows), "failed_steps": failed_steps}


# Past this, a waiting task is woken whatever RQ says about its job. A job can look alive and
# never run: "scheduled" when the worker holding RQ's scheduler lock died with its scheduler
# (nobody moves it until RQ's maintenance pass, 10 minutes later), "started" when its worker died
# before begin_attempt recorded anything, "queued" (STRANDED, below) when its worker took it off the
# queue and died before starting it. Duplicate wake-ups are harmless: begin_attempt runs only
# the one whose attempt number is due. Several times the scheduler's one-second poll.
OVERDUE_GRACE = timedelta(seconds=5)

# Not an RQ status: what job_statuses says of a job RQ calls queued that is on no queue. A worker
# took it off (BLPOP when it serves several queues, as ours do; BLMOVE into the queue's
# :intermediate list when it serves one) and its host died, or it lost Redis, before its work
# horse marked the job started. Nothing will run it: RQ fails a job left in :intermediate only
# after two of its maintenance passes (10-20 minutes), and one taken by BLPOP never.
STRANDED = "stranded"
# How far out of enqueued_at order a queue's list may be: enqueue_job stamps enqueued_at, then
# pushes, so two enqueuers (on hosts whose clocks differ by milliseconds) can push out of order.
QUEUE_ORDER_SLACK = timedelta(seconds=5)

# A job in these states will run without help; anything else (gone, finished, failed, or
# scheduled/started/stranded while its task is overdue past the grace) gets a fresh wake-up. The
# grace counts from the task's next_run_at, not from when a worker took the job (recorded nowhere):
# in a backlog, a job a healthy worker has just taken off its queue and not yet started is
# "stranded" and is woken a second time. That is harmless (begin_attempt runs one of them); the
# invariant checker, which must not report it, looks at a stranded job twice.
_LIVE_JOB_STATUSES = {JobStatus.QUEUED, JobStatus.SCHEDULED, JobStatus.STARTED, JobStatus.DEFERRED, STRANDED}


def dispatch_waiting(*, limit: int = 1000) -> list[int]:
    """Enqueue again every waiting task that has no live RQ job (Redis flushed, failed over, or
    down when the task started), or that is overdue by more than OVERDUE_GRACE while its job is
    not on a queue. Looks at waiting tasks `limit` at a time, earliest due first, and goes on to
    the next page while the last one looked at is overdue: a backlog of queued tasks ahead must
    not hide an overdue one whose job will never run, and tasks not due yet (with their jobs
    scheduled, the bulk of them) are read one page a pass. Returns the ids of the tasks it
    enqueued. A task that cannot be enqueued is logged and skipped."""
    import django_rq

    limit = whole_number(limit, field="limit", error=BadInput)
    redis = django_rq.get_connection(FLOW_QUEUE)
    waiting = Task.objects.filter(state__in=WAITING_STATES).order_by("next_run_at", "pk")
    enqueued, after, deadline = [], None, time.monotonic() + STEP_BUDGET
    while True:
        page = waiting if after is None else waiting.filter(
            Q(next_run_at__gt=after[0]) | Q(next_run_at=after[0], pk__gt=after[1]))
        rows = list(page.values_list("pk", "attempt_count", "next_run_at", "rq_job_id")[:limit])
        overdue_before = timezone.now() - OVERDUE_GRACE
        enqueued += _wake_lost(rows, redis, overdue_before)
        if len(rows) < limit or rows[-1][2] > overdue_before or time.monotonic() > deadline:
            return enqueued
        after = (rows[-1][2], rows[-1][0])


def job_statuses(job_ids: list[str], redis, *, on_queue_of: set[str] | None = None) -> dict[str, str]:
    """The status of each job RQ can read (fetch_jobs), with one rule of ours on top: a queued job
    is live only while it is on its origin queue (on_their_queues); one that is not is reported
    STRANDED (see there). The dispatcher and the invariant checker both decide by this.
    `on_queue_of`, when given, limits the queue check to those jobs (the others stay QUEUED): the
    dispatcher needs it only for overdue ones."""
    return statuses_of(fetch_jobs(job_ids, redis), redis, on_queue_of=on_queue_of)


def statuses_of(jobs: dict[str, Job], redis, *, on_queue_of: set[str] | None = None) -> dict[str, str]:
    """job_statuses of jobs already fetched (fetch_jobs), for a caller that reads more of them."""
    status_of = {job_id: job.get_status(refresh=False) for job_id, job in jobs.items()}
    queued = [job for job_id, job in jobs.items() if status_of[job_id] == JobStatus.QUEUED
              and (on_queue_of is None or job_id in on_queue_of)]
    on_queue = on_their_queues(queued, redis)
    for job in queued:
        if job.id not in on_queue:
            status_of[job.id] = STRANDED
    return status_of


def fetch_jobs(job_ids: list[str], redis) -> dict[str, Job]:
    """Each job RQ can read, by id. A hash it cannot read (rq#1575: a heartbeat landing after a
    result_ttl=0 job was deleted leaves one with no data) counts as no job, and must not hide the
    others: one pipelined read, then one by one when that one fails."""
    try:
        jobs = Job.fetch_many(job_ids, connection=redis)
    except NoSuchJobError:
        jobs = []
        for job_id in job_ids:
            try:
                jobs.append(Job.fetch(job_id, connection=redis))
            except NoSuchJobError:
                jobs.append(None)
    return {job_id: job for job_id, job in zip(job_ids, jobs) if job is not None}


def on_their_queues(jobs: list[Job], redis) -> set[str]:
    """The ids of those of `jobs` that may still be on their origin queue's list, read in one
    LINDEX per queue and one read of its head job, whatever the queue's length. A queue is FIFO
    (enqueue_job pushes at the tail, we never enqueue at the front; workers pop from the head by
    BLPOP, or BLMOVE into :intermediate), so a job enqueued more than QUEUE_ORDER_SLACK before the
    job at the head has been taken off it, and on an empty queue every one has. Searching the list
    instead (LPOS, LRANGE) costs its length per look: 0.7 s of Redis at 200,000 jobs. A job taken
    off within the slack of the head's enqueue stays "on the queue" until the head moves past it."""
    by_queue: dict[str, list[Job]] = {}
    for job in jobs:
        by_queue.setdefault(job.origin, []).append(job)
    origins = list(by_queue)
    with redis.pipeline(transaction=False) as pipe:
        for origin in origins:
            pipe.lindex(Queue.redis_queue_namespace_prefix + origin, 0)
        heads = {origin: as_text(head) for origin, head in zip(origins, pipe.execute()) if head is not None}
    head_jobs = fetch_jobs(sorted(set(heads.values())), redis) if heads else {}
    found = set()
    for origin, queued in by_queue.items():
        if origin not in heads:
            continue  # an empty queue holds none of them
        head = head_jobs.get(heads[origin])
        head_at = head.enqueued_at if head is not None else None
        for job in queued:
            # A head whose hash is gone (RQ skips it when it dequeues it) or a job without enqueued_at
            # cannot be placed: it is taken as on the queue, as before this rule.
            if job.id == heads[origin] or head_at is None or job.enqueued_at is None or \
                    job.enqueued_at >= head_at - QUEUE_ORDER_SLACK:
                found.add(job.id)
    return found


def _wake_lost(waiting: list[tuple], redis, overdue_before: datetime) -> list[int]:
    job_ids = [job_id for *_, job_id in waiting if job_id]
    # Whether a queued job is still on its queue changes nothing for a task within the grace (a
    # stranded job is live until then), and reading a queue is what costs: ask it of overdue ones only.
    overdue = {job_id for _, _, next_run_at, job_id in waiting if job_id and next_run_at <= overdue_before}
    status_of = job_statuses(job_ids, redis, on_queue_of=overdue) if job_ids else {}
    enqueued = []
    for task_id, attempts, next_run_at, job_id in waiting:
        status = status_of.get(job_id)
        if status in _LIVE_JOB_STATUSES and (status == JobStatus.QUEUED or next_run_at > overdue_before):
            continue
        try:
            if enqueue_attempt(task_id=task_id, attempt_number=attempts + 1, at=next_run_at):
                enqueued.append(task_id)
        except Exception:
            log.exception("dispatcher: could not enqueue task %s", task_id)
    return enqueued
