"""Break the deployment on purpose and prove the promise: whatever fails — a worker, Redis, the
database connections, the upstream — every task ends succeeded or dead (dead with its dead letter
and work order), no attempt runs twice, no task runs two executions at once or succeeds twice, no
resource is held by two executions at once, and `check_invariants` passes.

The faults: an upstream timing out and failing, database connections terminated, Redis flushed,
a work horse paused (SIGSTOP) past its lease, a flow holding the GIL past its lease, clocks
skewed between hosts (libfaketime), a worker killed, Redis restarted; PostgreSQL stopped is in
test_database_outage.py, on a server of its own.

One deployment (tests/faults/cluster.py) serves every fault; each fault starts its own tasks on a
pool of its own, breaks something while they run, and waits for them to settle. The faults that
kill workers come last: a killed worker's RQ scheduler lock is not taken over for a while (its
successor starts without a scheduler; the dispatcher wakes the retries instead, seconds later),
which would only slow the faults after it."""

import signal
import threading
import time

import psutil
import pytest
from django.db import connection
from django.utils import timezone

from scheduling.choices import AttemptOutcome, TaskState
from scheduling.models import Attempt, Task
from tests.faults.cluster import skewed
from tests.faults.runs import FaultRun, assert_promise_kept, deployed
from tests.telemetry.processes import wait_for

pytestmark = [pytest.mark.faults, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture(scope="module")
def deployment(django_db_setup, django_db_blocker):
    with django_db_blocker.unblock(), deployed() as deployment:
        yield deployment


def test_upstream_timing_out_then_failing_then_recovering_ends_every_task(deployment):
    run = FaultRun(deployment, "upstream timeout/500/401/ok", max_attempts=20)
    upstream = deployment.upstream
    upstream.switch("timeout")
    run.start(6)
    since = time.monotonic()
    # Each bad spell lasts until every live task has met it (retries may come late: RQ's scheduler
    # lock of a killed worker is not taken over at once, and the dispatcher then wakes them).
    for mode in ("timeout", "500", "401"):
        upstream.switch(mode)
        wait_for(lambda: run.live() <= upstream.met(mode), timeout=60, every=0.1)
    upstream.switch("ok")

    result = run.settle(since=since)

    assert_promise_kept(result)
    died_of_401 = Task.objects.filter(pk__in=run.task_ids, state=TaskState.DEAD, last_error__contains="HTTP 401")
    assert died_of_401.count() == 3 and result.succeeded == 3, "the 401 spell should kill the three even tasks"
    assert run.paid_twice() == []


def test_terminated_database_connections_lose_nothing(deployment):
    run = FaultRun(deployment, "DB connections killed")
    deployment.upstream.switch("slow", delay=0.7)
    run.start(8)
    wait_for(run.running_worker, timeout=30, every=0.05)
    since = time.monotonic()
    with connection.cursor() as cursor:
        cursor.execute("""SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
                          WHERE datname = current_database() AND pid <> pg_backend_pid()""")
        terminated = cursor.fetchone()[0]
    deployment.upstream.switch("ok")

    result = run.settle(since=since)

    assert_promise_kept(result)
    assert terminated >= 1, "no worker connection was terminated"
    # The flows cut off from the database recorded their outcomes on a new connection, as they were.
    assert run.stand_ins() == [] and run.paid_twice() == []


def running_with_backlog(deployment, name: str) -> FaultRun:
    """Tasks queued behind running ones and others scheduled for later, on the realistic mix."""
    run = FaultRun(deployment, name)
    deployment.upstream.switch("mixed", delay=0.3)
    run.start(10)
    run.start(4, later=3)
    wait_for(run.executions, timeout=30, every=0.05)
    return run


def test_flushall_with_tasks_queued_and_scheduled_loses_nothing(deployment):
    run = running_with_backlog(deployment, "Redis FLUSHALL")
    redis = deployment.redis.client()
    queued = redis.llen("rq:queue:flows") + redis.llen("rq:queue:retries")
    scheduled = redis.zcard("rq:scheduled:flows") + redis.zcard("rq:scheduled:retries")
    since = time.monotonic()
    redis.flushall()

    result = run.settle(since=since)

    assert_promise_kept(result)
    assert queued and scheduled, f"the flush met {queued} queued and {scheduled} scheduled jobs"
    assert run.paid_twice() == []


class Paused:
    """A work horse stopped with SIGSTOP, and when it died, if it did while watched (its worker
    may kill a stopped horse): by then an execution of it that never reported its end had ended."""

    def __init__(self, horse: psutil.Process):
        self.horse, self.died_at, self._done = horse, None, threading.Event()
        self._watch = threading.Thread(target=self._watching, name="faults-paused-horse", daemon=True)

    def stop(self) -> None:
        self.horse.send_signal(signal.SIGSTOP)
        self._watch.start()

    def resume(self) -> None:
        try:
            if self.horse.status() == psutil.STATUS_ZOMBIE:
                raise psutil.NoSuchProcess(self.horse.pid)
            self.horse.send_signal(signal.SIGCONT)
        except psutil.NoSuchProcess:
            # Killed while stopped, maybe since the watcher last looked (its worker reaps it and
            # gives its attempt up at once): it died no later than now.
            if self.died_at is None:
                self.died_at = timezone.now()

    def forget(self) -> None:
        """Resume it if it is still stopped (a test that failed meanwhile), and stop watching."""
        self.resume()
        self._done.set()
        self._watch.join(timeout=5)

    def _watching(self) -> None:
        while not self._done.wait(0.05):
            try:
                gone = self.horse.status() == psutil.STATUS_ZOMBIE
            except psutil.NoSuchProcess:
                gone = True
            if gone:
                self.died_at = timezone.now()
                return


def pause_a_running_horse(deployment, run: FaultRun) -> tuple[dict, Paused]:
    """SIGSTOP the work horse of an execution under way (found among its worker's children)."""
    execution = wait_for(run.running, timeout=30, every=0.05)
    paused = Paused(deployment.cluster.horse(execution["worker"], execution["pid"]))
    paused.stop()
    return execution, paused


def test_work_horse_paused_past_its_lease_and_resumed_while_its_retry_runs_holds_nothing_twice(deployment):
    run = FaultRun(deployment, "horse SIGSTOP, resumed as retry runs", settle_timeout=45)
    deployment.upstream.switch("ok")
    run.start(4, sleep=2)
    since = time.monotonic()
    execution, paused = pause_a_running_horse(deployment, run)
    try:
        # Past its 3 s lease, until the retry of its task is under way; then it wakes.
        wait_for(lambda: (retry := run.running([execution["task"]])) and retry["attempt"] > execution["attempt"],
                 timeout=30, every=0.05)
        paused.resume()
        result = run.settle(since=since, killed_at=paused.died_at)
    finally:
        paused.forget()

    assert_promise_kept(result)
    assert result.succeeded == 4
    assert deployment.upstream.stale_fencing_tokens(run.task_ids) == []


def test_work_horse_paused_past_its_lease_and_resumed_before_its_retry_is_due_succeeds_once(deployment):
    # Retries 6 s after a failure: the horse wakes after its attempt was given up, before the retry.
    run = FaultRun(deployment, "horse SIGSTOP, resumed before retry", delay=6, settle_timeout=45)
    deployment.upstream.switch("ok")
    run.start(4, sleep=2)
    since = time.monotonic()
    execution, paused = pause_a_running_horse(deployment, run)
    try:
        wait_for(lambda: Attempt.objects.filter(task_id=execution["task"], number=execution["attempt"])
                 .exclude(outcome=AttemptOutcome.RUNNING).exists(), timeout=30, every=0.05)
        paused.resume()
        result = run.settle(since=since, killed_at=paused.died_at)
    finally:
        paused.forget()

    assert_promise_kept(result)
    assert result.succeeded == 4
    assert deployment.upstream.stale_fencing_tokens(run.task_ids) == []


def gil_held_for(seconds: float) -> int:
    """The n for which sum(range(n)), one C call that never lets go of the GIL, takes about
    `seconds` on this machine."""
    n = 10**7
    began = time.perf_counter()
    sum(range(n))
    return int(n * seconds / (time.perf_counter() - began))


def test_flow_holding_the_gil_longer_than_its_lease_keeps_its_lease(deployment):
    run = FaultRun(deployment, "flow holds the GIL 2x its lease", settle_timeout=60)
    deployment.upstream.switch("ok")
    run.start(1, hold_gil=gil_held_for(2 * run.pool.lease_seconds))
    run.start(3, sleep=0.5)
    since = time.monotonic()

    result = run.settle(since=since)

    assert_promise_kept(result)
    assert result.succeeded == 4
    assert run.attempts(AttemptOutcome.ABANDONED) == 0, "a flow holding the GIL lost its lease"


# Clock skew: the flow worker of host a runs behind, the ops processes (the dispatcher, the lease
# sweeper) ahead, by half the lease and by twice it. Overlaps are judged on the upstream's clock (this process's, unskewed) and PostgreSQL's.
SKEW_LEASE = 4
BEHIND, AHEAD = ["host-a worker"], ["host-a ops", "host-b ops"]


@pytest.mark.parametrize("lease_multiple", [0.5, 2], ids=["half the lease", "twice the lease"])
def test_clocks_skewed_between_hosts_hold_nothing_twice(deployment, lease_multiple):
    skew = int(SKEW_LEASE * lease_multiple)
    cluster = deployment.cluster
    cluster.restart({**{name: skewed(f"-{skew}s") for name in BEHIND}, **{name: skewed(f"+{skew}s") for name in AHEAD}})
    try:
        run = FaultRun(deployment, f"clocks -{skew}s/+{skew}s (lease {SKEW_LEASE}s)", lease_seconds=SKEW_LEASE,
                       settle_timeout=45)
        deployment.upstream.switch("ok")
        run.start(8, sleep=3)
        since = time.monotonic()
        result = run.settle(since=since)
    finally:
        cluster.restart({name: {} for name in BEHIND + AHEAD})

    assert_promise_kept(result)
    assert result.succeeded == 8
    assert run.attempts(AttemptOutcome.ABANDONED) == 0, "a live holder's lease was taken on a skewed clock"
    assert deployment.upstream.stale_fencing_tokens(run.task_ids) == []



# The flow worker that schedules the retries (host-a's: its scheduler moves them on its own clock)
# runs ahead of PostgreSQL's: it moves every wake-up early by the difference, and no retry may start
# before its due time on PostgreSQL's clock (Attempt.started_at and scheduled_for are both its).
@pytest.mark.parametrize("skew", [2, 8], ids=["2 s", "8 s"])
def test_a_worker_clock_ahead_of_the_databases_starts_no_retry_early(deployment, skew):
    cluster = deployment.cluster
    cluster.restart({"host-a worker": skewed(f"+{skew}s")})
    try:
        run = FaultRun(deployment, f"worker clock +{skew}s, retries", delay=2, settle_timeout=60)
        deployment.upstream.switch("mixed")
        run.start(8)
        since = time.monotonic()
        result = run.settle(since=since)
    finally:
        cluster.restart({"host-a worker": {}})

    assert_promise_kept(result)
    retries = Attempt.objects.filter(task_id__in=run.task_ids, number__gt=1)
    assert retries.exists(), "no task was retried"
    early = [(a.task_id, a.number, (a.scheduled_for - a.started_at).total_seconds())
             for a in retries if a.started_at < a.scheduled_for]
    assert early == [], f"retries started before their due time on PostgreSQL's clock (task, attempt, s): {early}"

def test_worker_killed_mid_attempt_loses_nothing_and_runs_nothing_twice(deployment):
    run = FaultRun(deployment, "worker SIGKILL")
    deployment.upstream.switch("slow", delay=2.0)
    run.start(8)
    worker = wait_for(run.running_worker, timeout=30, every=0.1)
    since = time.monotonic()
    deployment.cluster.kill_worker(worker)  # the supervisor (settle) starts it again, as its host's would
    killed_at = timezone.now()
    deployment.upstream.switch("mixed", delay=0.2)

    result = run.settle(since=since, killed_at=killed_at)

    assert_promise_kept(result)
    assert run.attempts(AttemptOutcome.ABANDONED) >= 1, "the killed worker's attempt was not given up as lost"
    # Not run.paid_twice(): the upstream may answer ok to the killed flow after its death, and the
    # retry is then paid again (delivery is at least once); result.succeeded_twice counts what flows saw.


def test_redis_restart_mid_attempt_loses_nothing(deployment):
    run = running_with_backlog(deployment, "Redis restart")
    # Mid-attempt: a flow is under way (its worker heartbeating its job), others wait on the queues
    # and in the scheduled registries, and the idle worker is blocked in its dequeue.
    wait_for(run.running_worker, timeout=30, every=0.05)
    deployment.redis.client().set("faults:before-restart", "kept")
    since = time.monotonic()
    deployment.redis.stop()
    time.sleep(1)  # the outage
    deployment.redis.start()
    kept = deployment.redis.client().get("faults:before-restart")

    result = run.settle(since=since)

    assert kept == b"kept", "the restart did not keep Redis's data, as production's append-only file does"
    assert_promise_kept(result)
    assert result.succeeded, "nothing succeeded after the restart"
    assert run.paid_twice() == []
