"""Static files: the admin is styled with DEBUG off, with or without a collectstatic step."""

import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests import servers

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fetch_from_runserver(path: str, env: dict, headers: dict | None = None) -> tuple[int, dict]:
    """GET `path` from `manage.py runserver` started with `env`; return the status and the headers."""
    port = free_port()
    server = subprocess.Popen([sys.executable, "manage.py", "runserver", f"127.0.0.1:{port}", "--noreload"],
                              cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers=headers or {})
                with urllib.request.urlopen(request, timeout=5) as response:
                    return response.status, dict(response.headers)
            except urllib.error.HTTPError as error:
                return error.code, dict(error.headers)
            except (ConnectionError, urllib.error.URLError):
                if server.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"runserver did not answer: {server.stderr.read()}") from None
                time.sleep(0.2)
    finally:
        server.terminate()
        server.wait(timeout=10)


def server_env(**env: str) -> dict:
    """The web server's environment: the test database (not the app's) and this run's test Redis."""
    return {**os.environ, "DATABASE_URL": servers.database_url(), "REDIS_URL": servers.redis_url(),
            "DJANGO_SETTINGS_MODULE": "tests.served_settings", **env}


@pytest.mark.slow
@pytest.mark.django_db
def test_the_admin_stylesheet_is_served_with_debug_off_and_nothing_collected(tmp_path):
    env = server_env(DEBUG="0", TEST_STATIC_ROOT=str(tmp_path / "never-collected"))
    status, headers = fetch_from_runserver("/static/admin/css/base.css", env)
    assert status == 200
    assert headers["Content-Type"].startswith("text/css")


@pytest.mark.slow
@pytest.mark.django_db
def test_collected_static_files_are_served_compressed(tmp_path):
    env = server_env(DEBUG="0", TEST_STATIC_ROOT=str(tmp_path / "staticfiles"))
    subprocess.run([sys.executable, "manage.py", "collectstatic", "--noinput", "-v0"], cwd=ROOT, env=env,
                   check=True, timeout=120)
    status, headers = fetch_from_runserver("/static/admin/css/base.css", env, {"Accept-Encoding": "gzip"})
    assert status == 200
    assert headers["Content-Type"].startswith("text/css")
    assert headers["Content-Encoding"] == "gzip"
