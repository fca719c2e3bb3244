"""RQ jobs: thin wrappers that load ids and call one service."""

import logging

from rq import get_current_job

from scheduling import services

log = logging.getLogger(__name__)


def run_attempt_job(task_id: int, attempt_number: int, due: float | None = None):
    job = get_current_job()
    worker = (getattr(job, "worker_name", "") or "") if job else ""
    attempt = services.run_attempt(task_id=task_id, attempt_number=attempt_number, due=due, worker=worker,
                                   rq_job_id=job.id if job else "")
    return attempt.outcome if attempt else "skipped"


def dispatch_job():
    """Periodic: one dispatcher pass (see services.run_dispatcher)."""
    return services.run_dispatcher()


def batch_tick_job():
    """Periodic: one tick of every enabled batch config."""
    return services.run_batches()
