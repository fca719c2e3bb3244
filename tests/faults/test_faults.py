"""Break the deployment on purpose and prove the promise: whatever fails — a worker, Redis, the
database connections, the upstream — every task ends succeeded or dead (dead with its dead letter
and work order), no attempt runs twice, no task runs two executions at once or succeeds twice, no
resource is held by two executions at once, and `check_invariants` passes.

One deployment (tests/faults/cluster.py) serves every fault; each fault starts its own tasks on a
pool of its own, breaks something while they run, and waits for them to settle. The faults that
kill workers come last: a killed worker's RQ scheduler lock is not taken over for a while (its
successor starts without a scheduler; the dispatcher wakes the retries instead, seconds later),
which would only slow the faults after it."""

import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from types import SimpleNamespace

import pytest
from django.conf import settings
from django.db import connection
from django.test import override_settings
from django.utils import timezone

from compensation.models import DeadLetter
from scheduling.choices import AttemptOutcome, TaskState
from scheduling.models import Attempt, Task
from scheduling.services import start_task
from telemetry.invariants import check_invariants
from tests.factories import ResourceFactory, ResourcePoolFactory, RetryPolicyFactory
from tests.faults import report
from tests.faults.cluster import CLOCKS, Cluster, RedisServer
from tests.faults.executions import (
    executions_succeeded_twice,
    overlapping_executions,
    overlapping_holders,
)
from tests.faults.flow import CREATE, TABLE
from tests.faults.upstream import Upstream, serving
from tests.telemetry.processes import wait_for

pytestmark = [pytest.mark.faults, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

# A fault that has not settled by then has lost something.
SETTLE_TIMEOUT = 90


@pytest.fixture(scope="module")
def deployment(django_db_setup, django_db_blocker):
    upstream, redis = Upstream(), RedisServer()
    queues = {name: config["URL"] for name, config in settings.RQ_QUEUES.items()}
    with django_db_blocker.unblock(), serving(upstream) as upstream_url, \
            override_settings(RETRYOPS_FLOWS={**settings.RETRYOPS_FLOWS, "faults_http": "tests.faults.flow.faults_http"},
                              # The deployment's clocks here too: the invariant checker judges by them.
                              **{name: int(value) for name, value in CLOCKS.items()}):
        with connection.cursor() as cursor:
            cursor.execute(CREATE)
        cluster = Cluster(redis=redis, upstream_url=upstream_url)
        try:
            redis.start()
            for config in settings.RQ_QUEUES.values():  # this process starts tasks on the deployment's Redis
                config["URL"] = redis.url
            cluster.start_all()
            yield SimpleNamespace(upstream=upstream, redis=redis, cluster=cluster)
        finally:
            cluster.stop_all()
            redis.discard()
            for name, url in queues.items():
                settings.RQ_QUEUES[name]["URL"] = url
            with connection.cursor() as cursor:
                cursor.execute(f"DROP TABLE IF EXISTS {TABLE}")


@dataclass
class Settled:
    succeeded: int
    dead: int
    lost: list[int]
    run_twice: list[tuple]
    overlapping: list[tuple]
    held_twice: list[tuple]
    succeeded_twice: list[tuple]
    dead_without_work_order: list[int]
    invariants: str
    invariants_ok: bool


class FaultRun:
    """One fault's tasks on a pool of their own, and what became of them."""

    def __init__(self, deployment, name: str, *, max_attempts: int = 4):
        self.deployment, self.name, self.task_ids = deployment, name, []
        # A 3 s lease (heartbeat every second): a dead worker's attempt is given up within seconds.
        self.pool = ResourcePoolFactory(name=f"faults-{name}", lease_seconds=3)
        ResourceFactory.create_batch(24, pool=self.pool)
        self.policy = RetryPolicyFactory(name=f"faults-{name}", max_attempts=max_attempts, backoff="fixed",
                                         initial_delay_seconds=1, max_delay_seconds=1)

    def start(self, count: int, *, later: float = 0) -> None:
        run_at = timezone.now() + timedelta(seconds=later) if later else None
        for _ in range(count):
            task = start_task(flow="faults_http", pool_name=self.pool.name, created_by="faults",
                              policy=self.policy.name, payload={"i": len(self.task_ids)}, run_at=run_at)
            self.task_ids.append(task.pk)

    def executions(self) -> int:
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT count(*) FROM {TABLE} WHERE task_id = ANY(%s)", [self.task_ids])
            return cursor.fetchone()[0]

    def running_worker(self) -> str | None:
        """The worker of an attempt whose flow is under way (its execution recorded, no outcome yet)."""
        with connection.cursor() as cursor:
            cursor.execute(f"""SELECT a.worker FROM {Attempt._meta.db_table} a JOIN {TABLE} e ON e.attempt_id = a.id
                               WHERE a.outcome = %s AND a.task_id = ANY(%s) LIMIT 1""",
                           [AttemptOutcome.RUNNING, self.task_ids])
            row = cursor.fetchone()
        return row[0] if row else None

    def settle(self, *, since: float, killed_at: datetime | None = None) -> Settled:
        """Wait (the supervisor restarting what exits) until every task is succeeded or dead and
        every dead one has a dead letter on a work order; then check the invariants and add the
        fault's row to the table. `killed_at`: when the fault SIGKILLed workers, by which time an
        execution of theirs that never stamped its end had ended."""
        cluster = self.deployment.cluster
        restarts_before = cluster.restarts

        def settled() -> bool:
            cluster.supervise()
            states = list(Task.objects.filter(pk__in=self.task_ids).values_list("state", flat=True))
            if any(state not in (TaskState.SUCCEEDED, TaskState.DEAD) for state in states):
                return False
            return not self.dead_without_work_order()

        try:
            wait_for(settled, timeout=SETTLE_TIMEOUT, every=0.25)
        except AssertionError:
            pass  # counted below as lost, or dead without a work order
        took = time.monotonic() - since
        states = dict(Task.objects.filter(pk__in=self.task_ids).values_list("pk", "state"))
        with connection.cursor() as cursor:
            cursor.execute(f"""SELECT attempt_id, count(*) FROM {TABLE} WHERE task_id = ANY(%s)
                               GROUP BY attempt_id HAVING count(*) > 1 OR attempt_id IS NULL""", [self.task_ids])
            run_twice = cursor.fetchall()
        overlapping = overlapping_executions(self.task_ids, killed_at=killed_at)
        held_twice = overlapping_holders(self.task_ids, killed_at=killed_at)
        succeeded_twice = executions_succeeded_twice(self.task_ids)
        # As `manage.py check_invariants --deep` does, with the deployment's settings and Redis.
        checks = check_invariants(deep=True)
        result = Settled(
            succeeded=sum(s == TaskState.SUCCEEDED for s in states.values()),
            dead=sum(s == TaskState.DEAD for s in states.values()),
            lost=[pk for pk, s in states.items() if s not in (TaskState.SUCCEEDED, TaskState.DEAD)],
            run_twice=run_twice, overlapping=overlapping, held_twice=held_twice, succeeded_twice=succeeded_twice,
            dead_without_work_order=self.dead_without_work_order(),
            invariants="\n".join(f"{c.name}: {v.line()}" for c in checks for v in c.violations),
            invariants_ok=not any(c.count for c in checks))
        report.add(self.name, started=len(self.task_ids), succeeded=result.succeeded, dead=result.dead,
                   lost=len(result.lost), run_twice=len(run_twice),
                   overlapping=len({row[0] for row in overlapping}), held_twice=len({row[0] for row in held_twice}),
                   succeeded_twice=len(succeeded_twice), settle=took,
                   restarted=cluster.restarts - restarts_before)
        return result

    def dead_without_work_order(self) -> list[int]:
        dead = set(Task.objects.filter(pk__in=self.task_ids, state=TaskState.DEAD).values_list("pk", flat=True))
        covered = set(DeadLetter.objects.filter(task_id__in=dead, work_order__isnull=False)
                      .values_list("task_id", flat=True))
        return sorted(dead - covered)

    def live(self) -> set[int]:
        return set(Task.objects.filter(pk__in=self.task_ids).exclude(state__in=(TaskState.SUCCEEDED, TaskState.DEAD))
                   .values_list("pk", flat=True))

    def paid_twice(self) -> list[int]:
        """Tasks the upstream answered 2xx more than once: a success run again (legitimate only when
        a worker died between the upstream's answer and its record)."""
        return sorted(task for task, n in self.deployment.upstream.successes_of(self.task_ids).items() if n > 1)

    def stand_ins(self) -> list[int]:
        """Tasks whose outcome was recorded as a stand-in ("could not be stored") instead of as it happened."""
        results = Task.objects.filter(pk__in=self.task_ids, result__has_key="storage_note").values_list("pk", flat=True)
        errors = Attempt.objects.filter(task_id__in=self.task_ids, error_message__contains="could not be stored")
        return sorted({*results, *errors.values_list("task_id", flat=True)})

    def attempts(self, outcome: str) -> int:
        return Attempt.objects.filter(task_id__in=self.task_ids, outcome=outcome).count()


def assert_promise_kept(result: Settled) -> None:
    assert result.lost == [], f"tasks neither succeeded nor dead: {result.lost}"
    assert result.run_twice == [], f"attempts run more than once (attempt id, executions): {result.run_twice}"
    assert result.overlapping == [], ("executions of one task at the same time (task, attempt, started, ended, "
                                      f"other attempt, started, ended): {result.overlapping}")
    assert result.held_twice == [], ("resources held by two executions at once (resource, task, attempt, lease, "
                                     f"started, ended, other task, attempt, lease, started, ended): {result.held_twice}")
    assert result.succeeded_twice == [], f"tasks whose flow succeeded more than once: {result.succeeded_twice}"
    assert result.dead_without_work_order == [], f"dead tasks without a work order: {result.dead_without_work_order}"
    assert result.invariants_ok, result.invariants


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
