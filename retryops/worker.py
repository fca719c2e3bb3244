"""The flow workers' RQ worker: RQ's forking worker, which also keeps the lease of the attempt its
work horse runs (django-rq's WORKER_CLASS, so every `manage.py rqworker` uses it).

Why here and not in the work horse: a heartbeat thread in the horse stops with it. A flow that
holds the GIL (one long C call) starves it; a paused horse (SIGSTOP, a debugger) pauses it too,
and wakes up believing it still holds its lease. The worker process that forked the horse and
waits for it is neither: it renews the lease every quarter lease on PostgreSQL's clock, stops
renewing while its horse is stopped, and kills a horse that stays stopped for a quarter lease,
before the lease can run out. A horse that dies (killed so, by the OOM killer, by a segfault) is
reaped here, and only then is its attempt given up and its resource handed on, at once: its
execution is known to have stopped. The lease runs out by itself only if this process is silent
too (killed, paused, cut off from the database), and the sweeper takes it a heartbeat interval
after that (resources.sql.SWEEP).
"""

import logging
import os
import signal
import time

from django.db import DatabaseError, connection
from rq.defaults import DEFAULT_LOGGING_DATE_FORMAT, DEFAULT_LOGGING_FORMAT
from rq.job import Job
from rq.queue import Queue
from rq.scheduler import RQScheduler
from rq.worker import Worker as ForkingWorker

from retryops.redis_wait import WaitsForRedis
from scheduling import runner
from scheduling.errors import FlowNotFound
from scheduling.flows import get_flow, known_flows
from scheduling.jobs import run_attempt_job
from scheduling.queueing import SCHEDULER_LEAD, SCHEDULER_POLL

log = logging.getLogger(__name__)

# How often the worker looks at its work horse (RQ's job_monitoring_interval, 30 s by default):
# the renewal and the stopped-horse check run on this beat. Whole seconds (RQ's alarm()).
MONITOR_SLICE = 1
RUN_ATTEMPT = f"{run_attempt_job.__module__}.{run_attempt_job.__name__}"


def horse_stopped(pid: int) -> bool:
    """Whether the process is stopped (SIGSTOP, SIGTSTP, a tracer): its state in /proc is T or t."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read().rpartition(b")")[2].split()
    except OSError:
        return False  # gone, or no /proc: waiting for it tells
    return bool(fields) and fields[0] in (b"T", b"t")


class _LeaseKeeper:
    """One attempt's lease, kept from the worker process while the horse runs it."""

    def __init__(self, task_id: int, attempt_number: int, *, worker: str, rq_job_id: str):
        # The execution is this worker's horse's, from this job: a duplicate wake-up's horse must
        # not keep, nor give up, the attempt another horse runs.
        self.task_id, self.attempt_number = task_id, attempt_number
        self.worker, self.rq_job_id = worker, rq_job_id
        self.next_renewal = time.monotonic() + MONITOR_SLICE
        self.quarter_lease: float | None = None
        self.stopped_since: float | None = None
        self.kill_reason = ""

    def tick(self, horse_pid: int) -> str:
        """One look at the horse: renew the lease when due. Returns why the horse must be killed,
        or ""."""
        now = time.monotonic()
        if horse_stopped(horse_pid):
            self.stopped_since = self.stopped_since or now
            # Before the lease's quarter is known (the first renewal), a stopped horse gets a slice.
            if now - self.stopped_since >= (self.quarter_lease or MONITOR_SLICE):
                return f"its work horse was stopped (SIGSTOP, a debugger) for {now - self.stopped_since:.0f} s"
            return ""
        self.stopped_since = None
        if now < self.next_renewal:
            return ""
        from scheduling.services.attempts import keep_attempt_lease

        try:
            kept = keep_attempt_lease(task_id=self.task_id, attempt_number=self.attempt_number, worker=self.worker,
                                      rq_job_id=self.rq_job_id)
        except DatabaseError:
            # The database is away: keep trying every slice; the horse retries its outcome's
            # write meanwhile, and the sweeper gives this renewal a heartbeat once it is back.
            log.warning("task %s attempt %s: could not renew its lease; trying again", self.task_id,
                        self.attempt_number, exc_info=True)
            connection.close()
            self.next_renewal = now + MONITOR_SLICE
            return ""
        if kept.state == "renewed":
            self.quarter_lease = max(kept.lease_seconds / 4, MONITOR_SLICE)
            self.next_renewal = now + self.quarter_lease
        elif kept.state == "lost":
            return "its lease was taken back while it ran"
        elif kept.state == "not_started":
            self.next_renewal = now + MONITOR_SLICE
        else:
            self.next_renewal = float("inf")
        return ""


class DueScheduler(RQScheduler):
    """RQ's scheduler, looking every SCHEDULER_POLL seconds instead of every second, and moving a
    job SCHEDULER_LEAD before this host's clock reaches its score, to the fraction of a second (RQ's
    compares whole seconds): scheduling.queueing keeps the due time in the score. The runner waits
    out the lead; whether the attempt is due is then PostgreSQL's call (begin_attempt)."""

    def work(self):
        # RQ's loop, looking every SCHEDULER_POLL seconds; its heartbeat, which renews the locks and
        # the scheduler's hash for whole seconds past the interval, stays once an interval.
        self._install_signal_handlers()
        self.register_birth()
        next_beat = 0.0
        while not self._stop_requested:
            if self.should_reacquire_locks:
                self.acquire_locks()
            if time.monotonic() >= next_beat:
                self.heartbeat()
                next_beat = time.monotonic() + self.interval
            self.enqueue_scheduled_jobs()
            time.sleep(SCHEDULER_POLL)
        self.stop()

    def enqueue_scheduled_jobs(self):
        # RQ's enqueue_scheduled_jobs with time.time() and the lead for its whole-second current_timestamp().
        self._status = self.Status.WORKING
        if not self._scheduled_job_registries and self._acquired_locks:
            self.prepare_registries()
        for registry in self._scheduled_job_registries:
            job_ids = registry.get_jobs_to_schedule(time.time() + SCHEDULER_LEAD)
            if not job_ids:
                continue
            queue = Queue(registry.name, connection=self.connection, serializer=self.serializer)
            with self.connection.pipeline() as pipeline:
                jobs = Job.fetch_many(job_ids, connection=self.connection, serializer=self.serializer)
                for job in jobs:
                    if job is not None:
                        queue._enqueue_job(job, pipeline=pipeline, at_front=job.should_enqueue_at_front())
                for job_id in job_ids:
                    registry.remove(job_id, pipeline=pipeline)
                pipeline.execute()
        self._status = self.Status.STARTED


class Worker(WaitsForRedis, ForkingWorker):
    """RQ's forking worker that keeps its work horse's attempt lease (see the module) and outlasts a
    Redis outage (retryops.redis_wait)."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("job_monitoring_interval", MONITOR_SLICE)
        super().__init__(*args, **kwargs)
        self._lease: _LeaseKeeper | None = None

    def work(self, *args, **kwargs):
        # Every flow imported here, before any fork: a work horse starts with this process's flow
        # registry, and begin_attempt's one-statement start takes only flows loaded already
        # (scheduling.flows.loaded_flows). Imported in each horse instead, every flow named in
        # settings took the transaction's path, one statement more, and no import was saved.
        for name in known_flows():
            try:
                get_flow(name)
            except FlowNotFound as exc:
                log.warning("flow %s not loaded: %s; its attempts will say so", name, exc)
        return super().work(*args, **kwargs)

    def _start_scheduler(self, burst=False, logging_level="INFO", date_format=DEFAULT_LOGGING_DATE_FORMAT,
                         log_format=DEFAULT_LOGGING_FORMAT):
        # RQ's, with DueScheduler in place of RQScheduler (RQ names no class to override).
        self.scheduler = DueScheduler(
            self.queues, connection=self.connection, serializer=self.serializer, date_format=date_format,
            log_format=log_format, logging_level=logging_level if logging_level is not None else self.log.level)
        self.scheduler.acquire_locks()
        if not self.scheduler.acquired_locks:
            return
        if not burst:
            self.scheduler.start()
            return
        try:
            self.scheduler.register_birth()
            self.scheduler.enqueue_scheduled_jobs()
        finally:
            self.scheduler.release_locks()
            self.scheduler.register_death()

    def main_work_horse(self, job, queue):
        # In the work horse only: the runner then starts no heartbeat thread of its own.
        runner.LEASE_KEPT_BY_WORKER = True
        return super().main_work_horse(job, queue)

    def execute_job(self, job, queue):
        self._lease = _LeaseKeeper(job.args[0], job.args[1], worker=self.name, rq_job_id=job.id) \
            if job.func_name == RUN_ATTEMPT else None
        connection.close()  # see below
        try:
            super().execute_job(job, queue)
        finally:
            self._lease = None
            # Never fork a horse with this process's connection open: the two would share its socket.
            connection.close()

    def kill_horse(self, sig=signal.SIGKILL):
        # RQ's kills the horse's process group, which the horse makes its own (setpgrp) only once
        # it runs: a horse stopped before that (a pause right after the fork) shares this
        # process's group, and RQ's kill took the worker, its scheduler and its group with it.
        try:
            if os.getpgid(self.horse_pid) != self.horse_pid:
                os.kill(self.horse_pid, sig)
                return
        except ProcessLookupError:
            return  # gone already
        super().kill_horse(sig)

    def maintain_heartbeats(self, job):
        super().maintain_heartbeats(job)
        if self._lease is None or not self.horse_pid:
            return
        why = self._lease.tick(self.horse_pid)
        if why and not self._lease.kill_reason:
            self._lease.kill_reason = why
            self.log.warning("Worker %s: killing the work horse of task %s attempt %s: %s", self.name,
                             self._lease.task_id, self._lease.attempt_number, why)
            self.kill_horse()  # SIGKILL, which a stopped process receives too

    def handle_work_horse_killed(self, job, retpid, ret_val, rusage):
        super().handle_work_horse_killed(job, retpid, ret_val, rusage)
        if self._lease is None:
            return
        # Reaped: nothing runs under the attempt's lease any more, so it is given up now.
        from scheduling.services import abandon_stopped_attempt

        reason = (f"worker lost: its worker killed its work horse ({self._lease.kill_reason})"
                  if self._lease.kill_reason else f"worker lost: its work horse died (wait status {ret_val})")
        try:
            abandon_stopped_attempt(task_id=self._lease.task_id, attempt_number=self._lease.attempt_number,
                                    worker=self._lease.worker, rq_job_id=self._lease.rq_job_id, reason=reason)
        except DatabaseError:
            log.warning("task %s attempt %s: could not give up the attempt of a dead work horse; the lease "
                        "sweeper will", self._lease.task_id, self._lease.attempt_number, exc_info=True)
            connection.close()
