import django_rq
from rq import SimpleWorker

from scheduling.flows import flow


def work():
    """Run a burst worker in this process until the flow queue is empty."""
    worker = django_rq.get_worker("flows", worker_class=SimpleWorker)
    worker.work(burst=True)


calls: list[tuple[int, int]] = []


@flow("counting")
def counting(context):
    """Records each run, so tests can see how often a flow really ran."""
    calls.append((context.task_id, context.attempt))
    return {"runs": len(calls)}
