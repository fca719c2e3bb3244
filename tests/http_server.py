"""The app behind gunicorn on loopback, against the test database and the tests' Redis: for tests
that need real HTTP and real concurrency (several processes and threads, each request on its own
database connection)."""

import os
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import httpx

from tests import servers

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def running(command: list[str], *, ready_url: str, wait: float = 60, **popen):
    """Start `command` (a server), wait until `ready_url` answers 200, and stop it on exit (SIGTERM,
    SIGKILL after 15 s). A server that exits or is not ready within `wait` seconds raises
    RuntimeError with what it wrote on stderr."""
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, **popen)
    try:
        deadline = time.monotonic() + wait
        while True:
            try:
                if httpx.get(ready_url, timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                server.kill()
                raise RuntimeError(f"{Path(command[0]).name} did not start: {server.communicate()[1]}")
            time.sleep(0.2)
        yield server
    finally:
        server.terminate()
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


@contextmanager
def gunicorn(*, workers: int = 2, threads: int = 25, env: dict | None = None):
    """Serve the app with `workers` processes of `threads` threads each; yields its base URL."""
    port = free_port()
    environment = {**os.environ, "DATABASE_URL": servers.database_url(), "REDIS_URL": servers.redis_url(),
                   # Each request's thread closes its connection: 50 threads never keep 50 idle ones.
                   "DB_CONN_MAX_AGE": "0", **(env or {})}
    base = f"http://127.0.0.1:{port}"
    with running(
        [sys.executable, "-m", "gunicorn", "retryops.wsgi:application", "--bind", f"127.0.0.1:{port}",
         "--workers", str(workers), "--threads", str(threads), "--worker-class", "gthread", "--timeout", "60",
         "--graceful-timeout", "5", "--log-level", "warning"],
            ready_url=f"{base}/api/health/", cwd=ROOT, env=environment):
        yield base
