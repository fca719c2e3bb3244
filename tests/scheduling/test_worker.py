"""The flow worker (retryops.worker.Worker) keeps its work horse's lease from its own process: a flow
holding the GIL keeps its lease, and a stopped work horse is killed and its attempt given up at
once, before its lease can run out. Real forking workers on the test database and Redis."""

import os
import signal
import threading
import time

import django_rq
import pytest
from django.db import connection

from resources.choices import EventKind, ResourceState
from resources.models import Resource, ResourceEvent
from retryops.worker import Worker, horse_stopped
from scheduling import services
from scheduling.choices import AttemptOutcome, TaskState
from scheduling.models import Attempt, Task
from scheduling.services.attempts import keep_attempt_lease
from tests.factories import ResourceFactory, ResourcePoolFactory
from tests.scheduling import helpers
from tests.scheduling.helpers import in_thread

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def forking_worker() -> Worker:
    return django_rq.get_worker("retries", "flows", worker_class=Worker)


def hog_size(seconds: float) -> int:
    """How many numbers sum(range(n)) adds in about `seconds` on this machine, now."""
    began = time.perf_counter()
    sum(range(2_000_000))
    return int(2_000_000 * seconds / max(time.perf_counter() - began, 1e-6))


class Sweeper:
    """The dispatcher's recovery step, every 0.2 s in a thread, as the ops process runs it."""

    def __init__(self):
        self.abandoned, self._stop = [], threading.Event()

    def __enter__(self):
        def sweep():
            while not self._stop.wait(0.2):
                self.abandoned += services.recover_lost_attempts()
        self._thread = in_thread(sweep)
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(10)


def test_a_flow_holding_the_gil_past_its_lease_keeps_it_and_succeeds_once(redis_conn, instant_policy):
    pool = ResourcePoolFactory(name="short-leases", lease_seconds=2)
    alice = ResourceFactory(pool=pool, key="alice@x")
    helpers.calls.clear()
    task = services.start_task(flow="gil_hog", pool_name=pool, payload={"n": hog_size(5)}, created_by="test",
                               policy="instant")
    connection.close()
    with Sweeper() as sweeper:
        forking_worker().work(burst=True)
    task.refresh_from_db()
    assert (task.state, task.attempt_count, sweeper.abandoned) == (TaskState.SUCCEEDED, 1, [])
    assert not ResourceEvent.objects.filter(resource=alice, kind=EventKind.LEASE_EXPIRED).exists()


def test_a_stopped_work_horse_is_killed_and_its_attempt_given_up_before_its_lease_runs_out(redis_conn,
                                                                                          instant_policy):
    pool = ResourcePoolFactory(name="leases", lease_seconds=8)
    alice = ResourceFactory(pool=pool, key="alice@x")
    task = services.start_task(flow="demo", pool_name=pool, payload={"sleep": 30, "sleep_attempts": [1]},
                               created_by="test", policy="instant")
    worker, stopped_at = forking_worker(), []

    def stop_the_horse():
        while not (worker.horse_pid and Attempt.objects.filter(task=task).exists()):
            time.sleep(0.05)
        os.kill(worker.horse_pid, signal.SIGSTOP)
        stopped_at.append(time.monotonic())

    connection.close()
    stopper = in_thread(stop_the_horse)
    worker.work(burst=True, max_jobs=1)
    given_up_after = time.monotonic() - stopped_at[0]
    stopper.join(10)

    first = Attempt.objects.get(task=task, number=1)
    assert first.outcome == AttemptOutcome.ABANDONED and "stopped" in first.error_message
    assert given_up_after < 8  # well before the lease would have run out: nobody waited for it
    assert Resource.objects.get(pk=alice.pk).state == ResourceState.FAILED
    assert not ResourceEvent.objects.filter(resource=alice, kind=EventKind.LEASE_EXPIRED).exists()
    assert Task.objects.get(pk=task.pk).state == TaskState.RETRYING


def test_a_stopped_process_is_told_from_a_running_one():
    pid = os.fork()
    if pid == 0:
        time.sleep(30)
        os._exit(0)
    try:
        assert not horse_stopped(pid)
        os.kill(pid, signal.SIGSTOP)
        deadline = time.monotonic() + 5
        while not horse_stopped(pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert horse_stopped(pid)
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


@pytest.mark.django_db
def test_keeping_an_attempts_lease_says_whether_it_is_held(redis_conn, alice, instant_policy):
    task = services.start_task(flow="demo", pool_name=alice.pool, created_by="test", policy="instant")

    def keep(worker="w.1", rq_job_id="job-1"):
        return keep_attempt_lease(task_id=task.pk, attempt_number=1, worker=worker, rq_job_id=rq_job_id)

    assert keep().state == "not_started"
    started = services.begin_attempt(task_id=task.pk, attempt_number=1, worker="w.1", rq_job_id="job-1")
    kept = keep()
    assert (kept.state, kept.lease_seconds) == ("renewed", alice.pool.lease_seconds)
    # Another worker's horse, or another job's, started nothing: a duplicate wake-up's.
    assert keep(worker="w.2").state == keep(rq_job_id="job-2").state == "not_started"
    Resource.objects.filter(pk=alice.pk).update(lease_token=None, state=ResourceState.FAILED, lease_holder="",
                                                leased_at=None, leased_until=None, lease_kind="")
    assert keep().state == "lost"
    Attempt.objects.filter(pk=started.attempt.pk).update(outcome=AttemptOutcome.FAILED,
                                                        finished_at=started.attempt.started_at)
    assert keep().state == "ended"


def test_a_duplicate_wakeups_stopped_horse_gives_up_nothing_that_another_worker_runs(redis_conn, instant_policy):
    from scheduling.jobs import run_attempt_job
    from scheduling.queueing import FLOW_QUEUE

    pool = ResourcePoolFactory(name="leases", lease_seconds=8)
    alice = ResourceFactory(pool=pool, key="alice@x")
    task = services.start_task(flow="demo", pool_name=pool, created_by="test", policy="instant")
    # Attempt 1 runs on another host's worker; this worker gets a second wake-up for it (Redis
    # flushed and the dispatcher re-enqueuing, a scheduler that moved it twice), due a second on,
    # and its horse is stopped while it waits for that.
    running = services.begin_attempt(task_id=task.pk, attempt_number=1, worker="host-a.1", rq_job_id="job-a")
    queue = django_rq.get_queue(FLOW_QUEUE)
    queue.empty()
    queue.enqueue(run_attempt_job, task.pk, 1, time.time() + 1.5, job_id="duplicate")
    worker = forking_worker()

    def stop_the_horse():
        while not worker.horse_pid or os.getpgid(worker.horse_pid) != worker.horse_pid:
            time.sleep(0.01)
        os.kill(worker.horse_pid, signal.SIGSTOP)

    connection.close()
    stopper = in_thread(stop_the_horse)
    worker.work(burst=True, max_jobs=1)
    stopper.join(10)

    # The horse that was killed never started anything: host-a's attempt runs on, on its lease.
    assert Attempt.objects.get(pk=running.attempt.pk).outcome == AttemptOutcome.RUNNING
    row = Resource.objects.get(pk=alice.pk)
    assert (row.state, row.lease_token) == (ResourceState.IN_USE, running.attempt.lease_token)
    assert Task.objects.get(pk=task.pk).state == TaskState.RUNNING


def test_a_work_horse_starts_an_attempt_of_a_flow_named_in_settings_in_one_statement(redis_conn, alice, instant_policy,
                                                                                      monkeypatch, tmp_path):
    import scheduling.flows
    from scheduling.services import attempts

    task = services.start_task(flow="noop", pool_name=alice.pool, created_by="test", policy="instant")
    # As a worker process starts: no flow imported yet (start_task's check imported it here).
    monkeypatch.setattr(scheduling.flows, "_registry", {})
    in_transaction, claim_for = tmp_path / "claimed in the transaction", attempts.claim_for

    def claim_in_the_transaction(t):  # runs in the work horse, a fork of this process
        in_transaction.touch()
        return claim_for(t)

    monkeypatch.setattr(attempts, "claim_for", claim_in_the_transaction)
    connection.close()
    forking_worker().work(burst=True)

    assert Task.objects.get(pk=task.pk).state == TaskState.SUCCEEDED
    assert not in_transaction.exists(), "the horse took the transaction's path: its flow was not loaded before it forked"


KILL_A_HORSE_STOPPED_AT_ITS_FORK = """
import os, signal, sys, time
import django
django.setup()
from retryops.worker import Worker
pid = os.fork()
if pid == 0:  # a horse stopped before it made its own process group
    time.sleep(60)
    os._exit(0)
os.kill(pid, signal.SIGSTOP)
worker = Worker.__new__(Worker)
worker._horse_pid, worker.log = pid, __import__("logging").getLogger("test")
worker.kill_horse()
_, status = os.waitpid(pid, 0)
sys.exit(0 if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL else 3)
"""


def test_killing_a_horse_stopped_before_it_had_its_own_process_group_kills_only_the_horse():
    import subprocess
    import sys

    # In a process of its own (and session): what the kill must not take is the process killing.
    done = subprocess.run([sys.executable, "-c", KILL_A_HORSE_STOPPED_AT_ITS_FORK], start_new_session=True,
                          env={**os.environ, "DJANGO_SETTINGS_MODULE": "retryops.settings"}, timeout=60,
                          capture_output=True, text=True)
    assert done.returncode == 0, f"the worker killed itself with its horse (exit {done.returncode}): {done.stderr[-500:]}"
