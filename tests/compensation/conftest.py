import uuid

import django_rq
import pytest
from django.utils import timezone
from rq import SimpleWorker

from scheduling.choices import TaskEventKind, TaskState
from scheduling.flows import flow
from scheduling.models import Task, TaskEvent

# While True, the "until_fixed" flow fails retryably; a test "fixes" upstream by setting it False.
upstream = {"broken": True}


@flow("until_fixed")
def until_fixed(context):
    """Times out while upstream is broken: a task dies, and its replay succeeds once it is fixed."""
    if upstream["broken"]:
        raise TimeoutError("upstream timed out after 30s")
    return {"ok": True}


@pytest.fixture(autouse=True)
def _upstream_broken():
    upstream["broken"] = True
    yield
    upstream["broken"] = True


def work_default():
    """Run the default queue's jobs (bulk replay slices, notification sends) in a burst worker in this process."""
    django_rq.get_worker("default", worker_class=SimpleWorker).work(burst=True)


def dead_tasks(*, pool, policy, n=1, flow="demo", signature="TimeoutError: upstream timed out", resource=None,
               category="retryable") -> list[Task]:
    """`n` tasks that died, with their task.dead events, written directly: what a worker leaves
    behind, whether it went on or crashed right after the dying transaction committed."""
    now = timezone.now()
    tasks = Task.objects.bulk_create(
        Task(flow=flow, pool=pool, policy=policy, state=TaskState.DEAD, attempt_count=3, strict=False,
             idempotency_key=uuid.uuid4().hex, created_by="test", finished_at=now, resource=resource,
             last_error=f"{signature} ({i})", last_error_signature=signature, last_error_category=category)
        for i in range(n))
    TaskEvent.objects.bulk_create(TaskEvent(task=t, kind=TaskEventKind.DEAD, attempt_number=3,
                                            details={"signature": signature}) for t in tasks)
    return tasks


@pytest.fixture
def order(pool, instant_policy):
    """The work order the dead-letter step opens for two demo tasks that died (runbooks act on it)."""
    from compensation.services.dead_letters import collect_dead_letters
    from compensation.work_orders.models import WorkOrder

    dead_tasks(pool=pool, policy=instant_policy, n=2)
    collect_dead_letters()
    return WorkOrder.objects.get()
