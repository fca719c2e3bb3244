"""What every fault test shares: a deployment (tests/faults/cluster.py) with its upstream, the
tasks of one fault on a pool of their own, and the judgement of what became of them."""

import time
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from types import SimpleNamespace

import psutil
from django.conf import settings
from django.db import connection
from django.test import override_settings
from django.utils import timezone

from compensation.models import DeadLetter
from scheduling.choices import AttemptOutcome, TaskState
from scheduling.models import Attempt, Task
from scheduling.services import start_task
from telemetry.health.invariants import check_invariants
from tests.factories import ResourceFactory, ResourcePoolFactory, RetryPolicyFactory
from tests.faults import report
from tests.faults.cluster import Cluster, RedisServer, judged_by_cadences
from tests.faults.executions import (
    TABLE,
    dead_whose_flow_succeeded,
    executions_succeeded_twice,
    overlapping_executions,
    overlapping_holders,
    record,
)
from tests.faults.upstream import Upstream, serving
from tests.telemetry.processes import wait_for

# A fault that has not settled by then has lost something.
SETTLE_TIMEOUT = 90


@contextmanager
def deployed(*, env: dict | None = None):
    """Start the deployment (its own Redis, the upstream, the processes of two hosts) on the
    database `env`'s DATABASE_URL names, else the test database; this process starts tasks on its
    Redis. Yields (upstream, redis, cluster)."""
    upstream, redis = Upstream(), RedisServer()
    queues = {name: config["URL"] for name, config in settings.RQ_QUEUES.items()}
    with serving(upstream) as upstream_url, \
            override_settings(RETRYOPS_FLOWS={**settings.RETRYOPS_FLOWS, "faults_http": "tests.faults.flow.faults_http"}), \
            judged_by_cadences():
        cluster = Cluster(redis=redis, upstream_url=upstream_url, env=env)
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
    dead_whose_flow_succeeded: list[int]
    dead_without_work_order: list[int]
    invariants: str
    invariants_ok: bool


class FaultRun:
    """One fault's tasks on a pool of their own, and what became of them. A 3 s lease (heartbeat
    every second) unless `lease_seconds` says otherwise: a dead worker's attempt is given up within
    seconds; retries `delay` seconds after a failure."""

    def __init__(self, deployment, name: str, *, max_attempts: int = 4, lease_seconds: int = 3, delay: int = 1,
                 settle_timeout: float = SETTLE_TIMEOUT):
        self.deployment, self.name, self.task_ids = deployment, name, []
        self.settle_timeout = settle_timeout
        self.pool = ResourcePoolFactory(name=f"faults-{name}", lease_seconds=lease_seconds)
        ResourceFactory.create_batch(24, pool=self.pool)
        self.policy = RetryPolicyFactory(name=f"faults-{name}", max_attempts=max_attempts, backoff="fixed",
                                         initial_delay_seconds=delay, max_delay_seconds=delay)

    def start(self, count: int, *, later: float = 0, **payload) -> list[int]:
        """Start `count` tasks (their payload: an index "i", and `payload`); returns their ids."""
        run_at = timezone.now() + timedelta(seconds=later) if later else None
        started = []
        for _ in range(count):
            task = start_task(flow="faults_http", pool_name=self.pool.name, created_by="faults",
                              policy=self.policy.name, payload={"i": len(self.task_ids), **payload}, run_at=run_at)
            self.task_ids.append(task.pk)
            started.append(task.pk)
        return started

    def execution_records(self, task_ids=None) -> list[dict]:
        """The executions the upstream recorded, of `task_ids` (default: this fault's tasks)."""
        return self.deployment.upstream.executions_of(self.task_ids if task_ids is None else task_ids)

    def executions(self) -> int:
        return len(self.execution_records())

    def running(self, task_ids=None) -> dict | None:
        """An execution under way (started, no end reported) whose attempt is running, with its
        worker ("worker") added; None if there is none."""
        for execution in self.execution_records(task_ids):
            if execution["finished_at"] is None:
                worker = Attempt.objects.filter(task_id=execution["task"], number=execution["attempt"],
                                                outcome=AttemptOutcome.RUNNING).values_list("worker", flat=True).first()
                if worker:
                    return {**execution, "worker": worker}
        return None

    def running_worker(self) -> str | None:
        """The worker of an attempt whose flow is under way (its execution recorded, no outcome yet)."""
        execution = self.running()
        return execution["worker"] if execution else None

    def settle(self, *, since: float, killed_at: datetime | None = None) -> Settled:
        """Wait (the supervisor restarting what exits) until every task is succeeded or dead and
        every dead one has a dead letter on a work order; then check the invariants and add the
        fault's row to the table. `killed_at`: when the fault SIGKILLed workers, by which time an
        execution of theirs that never reported its end had ended."""
        cluster = self.deployment.cluster
        restarts_before = cluster.restarts

        def settled() -> bool:
            cluster.supervise()
            states = list(Task.objects.filter(pk__in=self.task_ids).values_list("state", flat=True))
            if any(state not in (TaskState.SUCCEEDED, TaskState.DEAD) for state in states):
                return False
            return not self.dead_without_work_order() and self.executions_over()

        try:
            wait_for(settled, timeout=self.settle_timeout, every=0.25)
        except AssertionError:
            pass  # counted below as lost, or dead without a work order
        took = time.monotonic() - since
        executions = self.execution_records()
        record(executions, self.task_ids)
        states = dict(Task.objects.filter(pk__in=self.task_ids).values_list("pk", "state"))
        with connection.cursor() as cursor:
            cursor.execute(f"""SELECT attempt_id, count(*) FROM {TABLE} WHERE task_id = ANY(%s)
                               GROUP BY attempt_id HAVING count(*) > 1 OR attempt_id IS NULL""", [self.task_ids])
            run_twice = cursor.fetchall()
        overlapping = overlapping_executions(self.task_ids, killed_at=killed_at)
        held_twice = overlapping_holders(self.task_ids, killed_at=killed_at)
        succeeded_twice = executions_succeeded_twice(self.task_ids)
        dead_ok = dead_whose_flow_succeeded(self.task_ids)
        # As `manage.py check_invariants --deep` does, with the deployment's settings and Redis.
        checks = check_invariants(deep=True)
        result = Settled(
            succeeded=sum(s == TaskState.SUCCEEDED for s in states.values()),
            dead=sum(s == TaskState.DEAD for s in states.values()),
            lost=[pk for pk, s in states.items() if s not in (TaskState.SUCCEEDED, TaskState.DEAD)],
            run_twice=run_twice, overlapping=overlapping, held_twice=held_twice, succeeded_twice=succeeded_twice,
            dead_whose_flow_succeeded=dead_ok, dead_without_work_order=self.dead_without_work_order(),
            invariants="\n".join(f"{c.name}: {v.line()}" for c in checks for v in c.violations),
            invariants_ok=not any(c.count for c in checks))
        report.add(self.name, started=len(self.task_ids), executions=len(executions), succeeded=result.succeeded,
                   dead=result.dead, lost=len(result.lost), run_twice=len(run_twice),
                   overlapping=len({row[0] for row in overlapping}), held_twice=len({row[0] for row in held_twice}),
                   succeeded_twice=len(succeeded_twice), dead_whose_flow_succeeded=len(dead_ok), settle=took,
                   restarted=cluster.restarts - restarts_before)
        return result

    def executions_over(self) -> bool:
        """Whether every execution reported its end or its process is gone: a flow resumed after a
        pause may still run after its task settled, and what it does then counts too."""
        for execution in self.execution_records():
            if execution["finished_at"] is None:
                try:
                    if psutil.Process(execution["pid"]).status() != psutil.STATUS_ZOMBIE:
                        return False
                except psutil.NoSuchProcess:
                    pass
        return True

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
    assert result.dead_whose_flow_succeeded == [], \
        f"dead tasks whose flow succeeded: {result.dead_whose_flow_succeeded}"
    assert result.dead_without_work_order == [], f"dead tasks without a work order: {result.dead_without_work_order}"
    assert result.invariants_ok, result.invariants
