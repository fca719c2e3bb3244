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


seen_attributes: list[dict] = []


@flow("attributes")
def attributes(context):
    seen_attributes.append(context.resource_attributes)


@flow("odd_result")
def odd_result(context):
    """Returns what plain JSON cannot hold."""
    import datetime
    import decimal

    return {"when": datetime.datetime(2026, 1, 2, 3, 4, 5), "amount": decimal.Decimal("1.50")}


@flow("sleep_then_sweep")
def sleep_then_sweep(context):
    """Outlives its lease several times over, then asks the sweeper what it would take back."""
    import time

    from resources.services import sweep_expired_leases

    time.sleep(float(context.payload.get("sleep", 2.5)))
    return {"swept": len(sweep_expired_leases())}
