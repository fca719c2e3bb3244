import threading

import django_rq
from django.db import connection
from django.utils import timezone
from rq import SimpleWorker

import resources.services
from scheduling.choices import TaskState
from scheduling.flows import flow
from scheduling.models import Task
from tests.factories import AttemptFactory, TaskFactory


def work():
    """Run a burst worker in this process until the flow and retry queues are empty."""
    worker = django_rq.get_worker("retries", "flows", worker_class=SimpleWorker)
    worker.work(burst=True)


def failed_there(task: Task, resource, *, number: int = 1) -> None:
    """An attempt of `task` that failed on `resource`, and the resource failed with it."""
    AttemptFactory(task=task, resource=resource, number=number, outcome="failed", finished_at=timezone.now())
    lease = resources.services.claim_by_id(resource_id=resource.pk, holder=task.holder)
    resources.services.release(resource=resource.pk, lease_token=lease.lease_token, outcome="failure",
                               error="TimeoutError: slow")


def died_on(resource, policy, *, payload=None, state=TaskState.DEAD, **fields) -> Task:
    """A strict task on `resource` whose one attempt failed there, and the resource failed."""
    fields = {"next_run_at": None, "finished_at": timezone.now(), **fields}
    task = TaskFactory(pool=resource.pool, policy=policy, payload=payload or {"order": 42}, state=state,
                       resource=resource, requested_resource=resource, strict=True, attempt_count=1,
                       last_error="TimeoutError: slow", **fields)
    failed_there(task, resource)
    return task


def run_of(task: Task, *, state: str, resource) -> Task:
    """A run of `task`'s business instance started since (an operator's retry of it) on `resource`:
    waiting for its next attempt there (live), or succeeded."""
    live = state != TaskState.SUCCEEDED
    return TaskFactory(pool=task.pool, policy=task.policy, flow=task.flow, payload=task.payload,
                       first_run_id=task.first_run_id or task.pk, state=state, strict=True, requested_resource=resource,
                       pinned_resource=resource if live else None, resource=resource,
                       next_run_at=timezone.now() if live else None, finished_at=None if live else timezone.now())


def in_thread(work):
    """Run `work` on a connection of its own; returns the thread, already started."""
    def run():
        try:
            work()
        finally:
            connection.close()
    thread = threading.Thread(target=run)
    thread.start()
    return thread


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


@flow("nan_result")
def nan_result(context):
    """Returns a NaN, as json.loads reads from upstream JSON; jsonb refuses it."""
    calls.append((context.task_id, context.attempt))
    return {"x": float("nan"), "ok": True}


# Characters json.loads reads from upstream JSON ("\\u0000", a "\\ud800" without its partner) that
# no text column or jsonb can hold; a flow is told which one by name, since a payload cannot hold it.
UNSTORABLE = {"nul": "\x00", "surrogate": "\ud800"}


@flow("unstorable_result")
def unstorable_result(context):
    """Returns the payload's unstorable character in a value and in a key."""
    calls.append((context.task_id, context.attempt))
    char = UNSTORABLE[context.payload["char"]]
    return {"name": f"a{char}b", f"k{char}": 1}


@flow("unstorable_error")
def unstorable_error(context):
    """Fails retryably on its first attempt with the payload's unstorable character (or the
    payload's text) in the message, then succeeds."""
    calls.append((context.task_id, context.attempt))
    if context.attempt == 1:
        text = UNSTORABLE.get(context.payload["char"], context.payload["char"])
        raise TimeoutError(f"upstream said {text} slow")
    return {"ok": True}


@flow("refused_result")
def refused_result(context):
    """Returns a result carrying the key a test's database trigger refuses to store."""
    calls.append((context.task_id, context.attempt))
    return {"refuse_me": True}


class Unreadable:
    """A value nothing can print: its repr() raises."""

    def __repr__(self):
        raise RuntimeError("no repr")


@flow("unreadable_result")
def unreadable_result(context):
    """Returns what neither JSON nor repr() can render."""
    calls.append((context.task_id, context.attempt))
    return {"thing": Unreadable()}


class UnreadableError(TimeoutError):
    """A failure whose message cannot be read: str() raises."""

    def __str__(self):
        raise RuntimeError("no str")


@flow("unreadable_error")
def unreadable_error(context):
    """Fails on its first attempt with an error whose str() raises, then succeeds."""
    calls.append((context.task_id, context.attempt))
    if context.attempt == 1:
        raise UnreadableError()
    return {"ok": True}


def drop_my_connection():
    """Terminate this thread's database connection from another one, as a database restart,
    a failover or pg_terminate_backend does while a flow runs."""
    pid = connection.connection.info.backend_pid

    def terminate():
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(%s)", [pid])

    in_thread(terminate).join()


@flow("connection_dropped_then_ok")
def connection_dropped_then_ok(context):
    """Succeeds, but the worker's database connection is gone by the time it records that."""
    calls.append((context.task_id, context.attempt))
    drop_my_connection()
    return {"paid": True}


@flow("connection_dropped_then_401")
def connection_dropped_then_401(context):
    """Fails for good (the upstream refused its credentials) on a worker whose connection is gone."""
    calls.append((context.task_id, context.attempt))
    drop_my_connection()
    raise PermissionError("HTTP 401 from upstream: credentials revoked")


class CountingWorker(SimpleWorker):
    """A burst worker that counts the jobs it executes: each is one delivery of a wake-up."""

    deliveries = 0

    def execute_job(self, job, queue):
        self.deliveries += 1
        return super().execute_job(job, queue)


@flow("gil_hog")
def gil_hog(context):
    """Holds the GIL for one long C call (no bytecode runs meanwhile, so no thread of this process
    does either), then reports how many times it ran."""
    calls.append((context.task_id, context.attempt))
    sum(range(context.payload["n"]))
    return {"runs": len(calls)}


seen_keys: list[tuple] = []


@flow("keys_then_ok")
def keys_then_ok(context):
    """Records the idempotency key and fencing token each attempt gets; the first attempt times out."""
    seen_keys.append((context.task_id, context.attempt, context.idempotency_key, context.fencing_token))
    if context.attempt == 1:
        raise TimeoutError("upstream timed out")
    return {"ok": True}
