"""RQ jobs: thin wrappers that load ids and call one service. They import the services inside
their bodies, because the queueing module imports this one to name the job it enqueues."""

import logging

import structlog
from rq import get_current_job

from retryops.language import in_stored_language

log = logging.getLogger(__name__)

# Seconds between the ops process's runs of the periodic jobs (retryops.ops).
DISPATCH_EVERY = 15
BATCH_TICK_EVERY = 60
# A read counts the hours changed since the last pass from the attempts: a minute's worth at most.
ROLL_UP_ATTEMPTS_EVERY = 60


@in_stored_language
def run_attempt_job(task_id: int, attempt_number: int, due: float | None = None):
    from scheduling.runner import run_attempt

    job = get_current_job()
    worker = (getattr(job, "worker_name", "") or "") if job else ""
    # The id of the request that made the attempt due (scheduling.queueing), for the log lines.
    request_id = job.meta.get("request_id") if job else None
    with structlog.contextvars.bound_contextvars(**({"request_id": request_id} if request_id else {})):
        attempt = run_attempt(task_id=task_id, attempt_number=attempt_number, due=due, worker=worker,
                              rq_job_id=job.id if job else "")
    return attempt.outcome if attempt else "skipped"


@in_stored_language
def dispatch_job():
    """Periodic: one dispatcher pass (see scheduling.services.recovery.run_dispatcher)."""
    from scheduling.services import run_dispatcher

    return run_dispatcher()


@in_stored_language
def batch_tick_job():
    """Periodic: one tick of every enabled batch config."""
    from scheduling.services import run_batches

    return run_batches(every=BATCH_TICK_EVERY)


def roll_up_attempts_job() -> dict:
    """Periodic: one pass of the rollups of attempts (scheduling.services.rollups)."""
    from scheduling.services.rollups import roll_up_attempts

    done = roll_up_attempts()
    return {"skipped": done.skipped, "below_xid": done.to_xid, "hours": done.hours, "full": done.full,
            "ms": round(done.seconds * 1000, 1)}
