"""A separate OS process that runs tasks through the services (see test_metrics_rollup): each
task fails once, then its retry succeeds, writing task.retry.scheduled and task.retry.succeeded.

Usage: python -m tests.telemetry.event_writer POOL_NAME TASKS; prints how many tasks succeeded.
"""

import os
import sys


def main(pool: str, tasks: int) -> int:
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "retryops.settings")
    django.setup()
    from scheduling import services
    from scheduling.runner import run_attempt

    succeeded = 0
    for _ in range(tasks):
        task = services.start_task(flow="demo", pool_name=pool, payload={"script": ["TimeoutError: slow", "ok"]},
                                   created_by=f"writer {os.getpid()}", policy="instant")
        run_attempt(task_id=task.pk, attempt_number=1)
        succeeded += run_attempt(task_id=task.pk, attempt_number=2).outcome == "succeeded"
    return succeeded


if __name__ == "__main__":
    print(main(sys.argv[1], int(sys.argv[2])))
