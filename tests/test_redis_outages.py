"""Workers and the ops process through a Redis outage: real `manage.py rqworker` and `ops` processes
against a redis-server of the test's own, stopped and started again on the same port."""

import shutil
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
from redis import Redis
from rq import Queue

from scheduling import services
from scheduling.choices import TaskState
from scheduling.jobs import run_attempt_job
from scheduling.models import Attempt, Task
from tests.factories import ResourceFactory, ResourcePoolFactory, RetryPolicyFactory
from tests.http_server import free_port
from tests.telemetry.processes import environment, manage, stop, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.skipif(shutil.which("redis-server") is None, reason="no redis-server")]

PASSWORD = "s3cret-redis-pass"


class RedisServer:
    """A redis-server on one port that keeps nothing and can be stopped and started again there."""

    def __init__(self):
        self.port, self.process = free_port(), None
        self.url = f"redis://:{PASSWORD}@127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.process = subprocess.Popen([shutil.which("redis-server"), "--port", str(self.port), "--bind", "127.0.0.1",
                                         "--save", "", "--appendonly", "no", "--requirepass", PASSWORD],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for(self.answers, timeout=10, every=0.05)

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)

    def answers(self) -> bool:
        try:
            return self.client().ping()
        except Exception:
            return False

    def client(self) -> Redis:
        return Redis.from_url(self.url, socket_timeout=2)


@pytest.fixture
def redis_server():
    server = RedisServer()
    server.start()
    yield server
    if server.process.poll() is None:
        server.stop()


@contextmanager
def started(redis: RedisServer, log: Path, *commands: list[str], **env: str):
    """Each command as a `manage.py` process on `redis`, logging to `log`, stopped on the way out."""
    environ = environment(REDIS_URL=redis.url, LOG_FORMAT="text", **env)
    with open(log, "ab") as out:
        processes = [manage(*command, env=environ, stdout=out, stderr=subprocess.STDOUT) for command in commands]
    try:
        yield processes
    finally:
        stop(*processes)


def worker(*queues: str) -> list[str]:
    return ["rqworker", *queues, "--with-scheduler", "--worker-ttl", "45"]


def registered_workers(redis: RedisServer) -> int:
    try:
        return redis.client().scard("rq:workers")
    except Exception:
        return 0


def dispatches(log: Path) -> int:
    """The ops process's runs of the dispatch step so far."""
    return log.read_text().count("ops step=dispatch ")


def outage(redis: RedisServer, seconds: float) -> None:
    redis.stop()
    time.sleep(seconds)
    redis.start()


@pytest.mark.django_db(transaction=True)
def test_a_worker_and_the_ops_process_outlast_a_redis_outage(redis_server, tmp_path):
    # The dispatcher every second: the ops process meets the outage, as it would in minutes of one.
    with started(redis_server, tmp_path / "log", worker("default"), ["ops", "--every", "dispatch=1"]) as processes:
        wait_for(lambda: registered_workers(redis_server) == 1 and dispatches(tmp_path / "log"), timeout=30)

        outage(redis_server, 6)

        returned = dispatches(tmp_path / "log")
        wait_for(lambda: dispatches(tmp_path / "log") > returned, timeout=15)
        wait_for(lambda: registered_workers(redis_server) == 1, timeout=15)
        job = Queue("default", connection=redis_server.client()).enqueue("os.getpid")
        wait_for(lambda: job.get_status(refresh=True) == "finished", timeout=15)
        assert [process.poll() for process in processes] == [None, None]
    log = (tmp_path / "log").read_text()
    assert f"Redis unreachable at redis://127.0.0.1:{redis_server.port}/0; waiting" in log
    assert PASSWORD not in log


@pytest.mark.django_db(transaction=True)
def test_a_worker_started_while_redis_is_down_waits_and_then_works(redis_server, tmp_path):
    redis_server.stop()
    with started(redis_server, tmp_path / "log", worker("default")) as (process,):
        time.sleep(3)
        assert process.poll() is None
        redis_server.start()
        job = Queue("default", connection=redis_server.client()).enqueue("os.getpid")
        wait_for(lambda: job.get_status(refresh=True) == "finished", timeout=20)
        assert process.poll() is None


@pytest.mark.django_db(transaction=True)
def test_a_flow_running_when_redis_vanishes_ends_recorded_and_its_worker_carries_on(redis_server, tmp_path):
    pool = ResourcePoolFactory(name="outage")
    ResourceFactory(pool=pool, key="alice@x")
    RetryPolicyFactory(name="once", max_attempts=1)
    task = services.start_task(flow="demo", pool_name=pool, payload={"script": ["ok"], "sleep": 4},
                               created_by="test", policy="once")
    with started(redis_server, tmp_path / "log", worker("flows")) as (process,):
        Queue("flows", connection=redis_server.client()).enqueue(run_attempt_job, task.pk, 1, None)
        wait_for(lambda: Attempt.objects.filter(task=task, started_at__isnull=False).exists(), timeout=30)

        outage(redis_server, 6)  # the flow ends while Redis is away

        assert Task.objects.get(pk=task.pk).state == TaskState.SUCCEEDED
        job = Queue("flows", connection=redis_server.client()).enqueue("os.getpid")
        wait_for(lambda: job.get_status(refresh=True) == "finished", timeout=15)
        assert process.poll() is None
