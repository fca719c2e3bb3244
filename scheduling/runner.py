"""What a worker does with one wake-up: begin the attempt, run the flow outside any transaction
with a lease heartbeat beside it, and record the outcome."""

import contextvars
import logging
import signal
import threading
import time

import structlog
from django.db import InterfaceError, OperationalError, connection

from resources.errors import LeaseMismatch
from retryops.jsonsafe import check_text, clean_text, make_storable
from retryops.masking import mask_secrets, scrub_secret_values, secret_values
from scheduling.models import Attempt
from scheduling.queueing import enqueue_attempt
from scheduling.services.attempts import EarlyWakeup, begin_attempt, finish_attempt

log = logging.getLogger(__name__)


# A wake-up comes a little early: the scheduler moves it queueing.SCHEDULER_LEAD ahead (a work
# horse's start), one due within queueing.IMMEDIATE_WITHIN is queued at once, and a scheduler on a
# host whose clock runs ahead of the database's moves it early by the difference. Waiting out that much here keeps deliveries equal to attempts; deferring through RQ
# again would add a scheduler pass. Anything earlier is deferred.
MAX_EARLY_WAIT = 1.5


def _wait_out_early_wakeup(due: float | None) -> None:
    if due is None or due - time.time() > MAX_EARLY_WAIT:
        return
    # A loop, because begin_attempt compares with the clock and a sleep may end a little early.
    while (early := due - time.time()) > 0:
        time.sleep(early)


# Whether the worker process that forked this one renews the attempt's lease (retryops.worker
# sets it before it forks a work horse). Then the flow's GIL, or a pause of the work horse, cannot
# stop the renewal, and the work horse runs no heartbeat thread of its own. Otherwise (a worker
# that runs jobs in its own process, such as RQ's SimpleWorker) the thread below renews it, which
# a flow holding the GIL or a paused process does stop.
LEASE_KEPT_BY_WORKER = False


def run_attempt(*, task_id: int, attempt_number: int, due: float | None = None, worker: str = "",
                rq_job_id: str = "") -> Attempt | None:
    """Run one attempt of a task: what the RQ job does. `due` is the attempt's due time (a Unix
    timestamp) by the clock of the host that scheduled it: a wake-up that by this host's clock is
    up to a second and a half early waits first, so most early wake-ups cost no transaction.
    Whether the attempt is due is then PostgreSQL's call (begin_attempt): still early by that
    clock, it waits again when that is short, or goes back on the queue for as long as is left.
    Log lines written meanwhile carry the task, the attempt and its resource (telemetry/logs.py)."""
    with structlog.contextvars.bound_contextvars(task_id=task_id, attempt=attempt_number):
        _wait_out_early_wakeup(due)
        while isinstance(started := begin_attempt(task_id=task_id, attempt_number=attempt_number, worker=worker,
                                                  rq_job_id=rq_job_id), EarlyWakeup):
            if started.seconds > MAX_EARLY_WAIT:
                # Relative to this host's clock: RQ's scheduler, on a host whose clock differs, wakes it
                # early or late by the difference, and the database decides again then.
                enqueue_attempt(task_id=task_id, attempt_number=attempt_number, delay=started.seconds)
                return None
            time.sleep(started.seconds)
        if started is None:
            return None
        with structlog.contextvars.bound_contextvars(resource_key=started.context.resource_key):
            log.info("task %s attempt %s started on %s", task_id, attempt_number, started.context.resource_key)
            attempt = _run(started)
            if attempt is not None:
                error = {"error_class": attempt.error_class} if attempt.error_class else {}
                log.info("task %s attempt %s %s", task_id, attempt_number, attempt.outcome,
                         extra={"outcome": attempt.outcome, "duration_ms": attempt.duration_ms, **error})
            return attempt


def _run(started) -> Attempt | None:
    began = time.monotonic()
    heartbeat = None if LEASE_KEPT_BY_WORKER else _Heartbeat(started.context.heartbeat,
                                                                interval=started.lease_seconds / 3)
    if heartbeat is not None:
        heartbeat.start()
    try:
        result = started.flow(started.context)
    except Exception as exc:  # a flow's failure is data, whatever its type
        error, result = exc, None
    else:
        error = None
    finally:
        if heartbeat is not None:
            heartbeat.stop()
    duration = time.monotonic() - began
    # RQ's job timeout (an alarm in this process) is the flow's: the outcome's write, retried through
    # a database outage, has its own bound (OUTCOME_RETRY_FOR), and a timeout raised into it would
    # lose a success that has happened.
    if threading.current_thread() is threading.main_thread():
        signal.alarm(0)
    if error is not None:
        secrets = secret_values(started.context.payload, started.context.resource_attributes)
        return _record_failure(started.attempt, error, duration, secrets)
    try:
        # Made storable in here: a result that even make_storable cannot read (its repr raises, or
        # it nests past the recursion limit) is a success all the same.
        return _finish(attempt=started.attempt, result=_storable(result), duration=duration)
    except Exception as exc:
        # A success left `running` would be re-run by the dispatcher once its lease ran out, side
        # effects and all. The flow did succeed: record that, with a note in place of the result.
        log.exception("task %s attempt %s: its result could not be stored; recording the success without it",
                      started.attempt.task_id, started.attempt.number)
        note = clean_text(f"the result could not be stored: {type(exc).__name__}: {exc}")[:2000]
        return finish_attempt(attempt=started.attempt, result={"value": None, "storage_note": note},
                              duration=duration)


# How long an outcome's write is tried again while the database is away, and the longest wait
# between tries. Meanwhile the worker keeps renewing the lease (retryops.worker) once the database
# is back, and the sweeper gives a lapsed lease one heartbeat interval before it takes it, so an
# outage shorter than this loses no outcome: a success lost here would be run again.
OUTCOME_RETRY_FOR = 600.0
OUTCOME_RETRY_MAX_WAIT = 1.0


def _finish(**outcome) -> Attempt:
    """finish_attempt, tried again on a new connection with backoff while the database is away
    (a restart, a failover, pg_terminate_backend, an outage) for up to OUTCOME_RETRY_FOR. The
    stand-ins below are for a value the database refuses: one for a dropped connection would lose
    a success's result, or the error a verdict depends on (a 401 retried as if transient). Safe to
    repeat: an outcome that did commit leaves the attempt ended, and the next call records nothing
    more."""
    deadline, wait = time.monotonic() + OUTCOME_RETRY_FOR, 0.05
    while True:
        try:
            return finish_attempt(**outcome)
        except (OperationalError, InterfaceError):
            if time.monotonic() + wait > deadline:
                raise
            log.warning("recording the outcome failed on the database connection; trying again in %.2f s on a "
                        "new one", wait, exc_info=True)
            connection.close()
            time.sleep(wait)
            wait = min(wait * 2, OUTCOME_RETRY_MAX_WAIT)


def _storable(result):
    """A flow's result as jsonb can keep it. A result it cannot hold does not turn a success into
    a failure (a retry would repeat the flow's side effects): it is repaired, and what had to
    change is kept beside it, {"value": ..., "storage_note": ...}, so the task's row says so.
    Masked first: the note and the warning name what they repaired."""
    stored, notes = make_storable(mask_secrets(result))
    if not notes:
        return stored
    note = "; ".join(notes)
    log.warning("flow result changed to be storable: %s", note)
    return {"value": stored, "storage_note": note[:2000]}


def _record_failure(attempt: Attempt, error: Exception, duration: float, secrets: list[str]) -> Attempt | None:
    """Record the flow's failure. If that write fails too (a value nobody foresaw, a trigger, an
    error whose str() raises), the
    attempt still ends failed, with a message saying why its error is missing: left `running`, it
    would wait for its lease to run out and be retried as a lost worker's, its failure never
    counted against the resource or judged by the policy."""
    try:
        return _finish(attempt=attempt, error=_storable_error(error, secrets), raised=error, duration=duration)
    except Exception as exc:
        log.exception("task %s attempt %s: its error could not be stored; recording the failure without it",
                      attempt.task_id, attempt.number)
        stand_in = _stand_in(error, f"the error could not be stored: {type(exc).__name__}: {exc}"[:2000], secrets)
        try:
            return finish_attempt(attempt=attempt, error=stand_in, duration=duration)
        except Exception:
            # The dispatcher abandons it once its lease runs out, and retries the task.
            log.exception("task %s attempt %s: its failure could not be recorded; it stays running",
                          attempt.task_id, attempt.number)
            return None


def _stand_in(error: Exception, message: str, secrets: list[str]) -> Exception:
    """An exception of the same class name as `error` with `message`, cleaned for a text column and
    without the secrets' values. The class name is kept as it is: patterns and signatures match
    it, and a secret that happens to end it ("Errorless1" after "HTTP") is not in it."""
    stand_in = type(type(error).__name__, (Exception,), {"__module__": type(error).__module__})
    return stand_in(clean_text(scrub_secret_values(message, secrets)))


def _storable_error(error: Exception, secrets: list[str]) -> Exception:
    """The flow's error, or a stand-in of the same class name whose message has the values of the
    attempt's secrets (retryops.masking.secret_values) masked, and its NUL characters and lone
    surrogates replaced. The error's text is written to the attempt (its signature is made from
    it, so grouping sees the mask), the task, the resource's history, dead letters, work orders
    and their notifications, none of which masks anything in free text; and a text column cannot
    hold NUL or a lone surrogate. The policy judges the error as the flow raised it (`raised`):
    a mask in its place turned "invalid password" into "invalid ******", and a verdict with it."""
    message = str(error)
    return error if not check_text(message) and scrub_secret_values(message, secrets) == message \
        else _stand_in(error, message, secrets)


class _Heartbeat:
    """Extends the attempt's lease while its flow runs, so only a dead or hung worker's lease
    expires. Runs in a thread with its own database connection; dies with the worker."""

    def __init__(self, beat, *, interval: float):
        self._beat, self._interval = beat, max(interval, 0.5)
        self._stopped = threading.Event()
        # In a copy of the attempt's context, so its log lines name the task, attempt and resource.
        context = contextvars.copy_context()
        self._thread = threading.Thread(target=context.run, args=(self._run,), name="lease-heartbeat", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
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
