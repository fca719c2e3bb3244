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
    RuntimeError with what it wrote on stderr (a pipe unless `stderr` names a file: a server that
    logs every request fills a pipe nobody reads, and then waits)."""
    popen.setdefault("stderr", subprocess.PIPE)
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, text=True, **popen)
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
                raise RuntimeError(f"{Path(command[0]).name} did not start: {server.communicate()[1] or 'see its log'}")
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
def gunicorn(*, workers: int = 2, threads: int = 25, env: dict | None = None, stderr=subprocess.PIPE):
    """Serve the app as deploy/ does (deploy/gunicorn.conf.py: its worker, limits and logging) with
    `workers` processes of `threads` threads each, its log on `stderr`; yields its base URL."""
    port = free_port()
    environment = {**os.environ, "DATABASE_URL": servers.database_url(), "REDIS_URL": servers.redis_url(),
                   "DJANGO_SETTINGS_MODULE": "tests.served_settings", "WEB_CONCURRENCY": str(workers),
                   "GUNICORN_CMD_ARGS": f"--bind 127.0.0.1:{port} --threads {threads}", **(env or {})}
    base = f"http://127.0.0.1:{port}"
    with running(
        [sys.executable, "-m", "gunicorn", "--config", "deploy/gunicorn.conf.py", "retryops.wsgi:application",
         "--graceful-timeout", "5", "--log-level", "warning"],
            ready_url=f"{base}/readyz", cwd=ROOT, env=environment, stderr=stderr):
        yield base
