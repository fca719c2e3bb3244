"""deploy/: the Procfile and the compose file run exactly what `manage.py up` runs, and the
production settings pass `manage.py check --deploy`."""

import fnmatch
import os
import secrets
import shlex
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from retryops.management.commands.up import Command as Up
from tests import servers

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
# What an operator behind a TLS-terminating proxy sets (docs/deployment.md's production settings).
PRODUCTION_ENV = {
    "RETRYOPS_REQUIRE_CONFIG": "true",
    "DEBUG": "false",
    "SECRET_KEY": secrets.token_hex(32),
    "ALLOWED_HOSTS": "retryops.example.com",
    "CSRF_TRUSTED_ORIGINS": "https://retryops.example.com",
    "RETRYOPS_PUBLIC_URL": "https://retryops.example.com",
    "SECURE_SSL_REDIRECT": "true",
    "SECURE_PROXY_SSL_HEADER": "X-Forwarded-Proto: https",
    "SECURE_HSTS_SECONDS": "31536000",
}
# Services of the compose file that are not processes of the Procfile.
COMPOSE_ONLY = {"postgres", "redis", "setup"}


def procfile() -> dict[str, list[str]]:
    commands = {}
    for line in (DEPLOY / "Procfile").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, command = line.partition(":")
            commands[name.strip()] = shlex.split(command)
    return commands


def manage(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env={**os.environ, **env},
                          capture_output=True, text=True, timeout=120)


@pytest.mark.slow
def test_check_deploy_is_clean_under_the_production_settings():
    result = manage("check", "--deploy", "--fail-level", "WARNING", env=PRODUCTION_ENV)
    assert result.returncode == 0, result.stdout + result.stderr
    # Silenced, the two HSTS checks that would commit every subdomain (settings.SILENCED_SYSTEM_CHECKS).
    assert "System check identified no issues (2 silenced)." in result.stdout


def test_the_procfile_runs_what_up_runs(settings):
    children = Up().child_processes("127.0.0.1:8000", receiver_port=None)
    prefix = [sys.executable, str(ROOT / "manage.py")]
    expected = {}
    for name, (command, _env) in children.items():
        assert command[:2] == prefix
        expected[name.replace(" ", "_")] = ["python", "manage.py", *command[2:]]
    # The web server is the one difference: gunicorn with deploy/'s settings for runserver.
    assert expected.pop("web")[2] == "runserver"
    processes = procfile()
    module, _, application = settings.WSGI_APPLICATION.rpartition(".")
    assert processes.pop("web") == ["gunicorn", "--config", "deploy/gunicorn.conf.py", f"{module}:{application}"]
    assert processes == expected


def test_the_compose_services_run_the_procfile_commands():
    services = yaml.safe_load((DEPLOY / "compose.yaml").read_text())["services"]
    commands = {name: shlex.split(service["command"]) for name, service in services.items()
                if name not in COMPOSE_ONLY}
    assert commands == procfile()


def test_the_compose_file_probes_web_by_its_readiness_and_runs_a_standby_ops_process():
    services = yaml.safe_load((DEPLOY / "compose.yaml").read_text())["services"]
    assert "/readyz'" in " ".join(services["web"]["healthcheck"]["test"])
    assert services["ops"]["deploy"]["replicas"] == 2


def test_the_image_installs_the_locked_versions():
    """The image runs what CI tested and .ci/audit checked: requirements.lock constrains its pip
    install, and the build context (Dockerfile.dockerignore) keeps the lock."""
    installs = [shlex.split(command) for line in (DEPLOY / "Dockerfile").read_text().splitlines()
                if line.startswith("RUN ") for command in line.removeprefix("RUN ").split("&&")
                if command.split()[:2] == ["pip", "install"]]
    assert installs == [["pip", "install", "-c", "requirements.lock", "."]]
    ignored = [line.strip() for line in (DEPLOY / "Dockerfile.dockerignore").read_text().splitlines()
               if line.strip() and not line.startswith("#")]
    assert not [pattern for pattern in ignored if fnmatch.fnmatch("requirements.lock", pattern)]


def test_every_compose_service_of_the_app_requires_its_configuration():
    """With RETRYOPS_REQUIRE_CONFIG a container started without DATABASE_URL, REDIS_URL or SECRET_KEY
    stops, naming them, instead of running on servers and a key of its own."""
    services = yaml.safe_load((DEPLOY / "compose.yaml").read_text())["services"]
    for name, service in services.items():
        if name not in ("postgres", "redis"):
            assert service["environment"]["RETRYOPS_REQUIRE_CONFIG"] == "true", name


@pytest.mark.slow
@pytest.mark.parametrize("variable, value, said", [
    ("RETRYOPS_REQUIRE_CONFIG", "always", "RETRYOPS_REQUIRE_CONFIG='always' is not a boolean"),
    ("SECURE_SSL_REDIRECT", "2", "SECURE_SSL_REDIRECT='2' is not a boolean"),
    ("SECURE_HSTS_SECONDS", "-1", "SECURE_HSTS_SECONDS=-1 must be at least 0"),
    ("SECURE_HSTS_SECONDS", "1e9", "SECURE_HSTS_SECONDS='1e9' is not an integer"),
    ("SECURE_HSTS_SECONDS", "99999999999", "SECURE_HSTS_SECONDS=99999999999 must be at most 63072000"),
    ("SECURE_PROXY_SSL_HEADER", "https", "SECURE_PROXY_SSL_HEADER='https' is not a header and its value"),
    ("SECURE_PROXY_SSL_HEADER", "X-Forwarded-Proto:", "SECURE_PROXY_SSL_HEADER='X-Forwarded-Proto:' is not"),
    ("SECURE_PROXY_SSL_HEADER", "X Proto: https", "SECURE_PROXY_SSL_HEADER='X Proto: https' is not"),
])
def test_a_bad_production_setting_stops_start_up_naming_it(variable, value, said):
    result = manage("check", env={**PRODUCTION_ENV, variable: value})
    assert result.returncode != 0
    assert said in result.stderr


@pytest.mark.slow
@pytest.mark.parametrize("variable, value, said", [
    ("WEB_CONCURRENCY", "0", "WEB_CONCURRENCY=0 must be at least 1"),
    ("WEB_CONCURRENCY", "300", "WEB_CONCURRENCY=300 must be at most 256"),
])
def test_a_bad_web_server_setting_stops_gunicorn_naming_it(variable, value, said):
    result = subprocess.run([sys.executable, "-m", "gunicorn", "--config", "deploy/gunicorn.conf.py",
                             "retryops.wsgi:application"], cwd=ROOT, env={**os.environ, variable: value},
                            capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert said in result.stderr


def test_the_proxy_ssl_header_becomes_djangos_meta_key(monkeypatch):
    from retryops.env import env_header_value

    monkeypatch.setenv("SECURE_PROXY_SSL_HEADER", " X-Forwarded-Proto : https ")
    assert env_header_value("SECURE_PROXY_SSL_HEADER") == ("HTTP_X_FORWARDED_PROTO", "https")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.slow
@pytest.mark.django_db
def test_the_procfiles_web_command_serves_the_app_with_gthread_and_the_workers_it_was_given():
    port = free_port()
    env = {**os.environ, **PRODUCTION_ENV, "DATABASE_URL": servers.database_url(), "REDIS_URL": servers.redis_url(),
           "GUNICORN_CMD_ARGS": f"--bind 127.0.0.1:{port} --threads 3", "WEB_CONCURRENCY": "1"}
    server = subprocess.Popen([sys.executable, "-m", *procfile()["web"]], cwd=ROOT, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as response:
                    assert response.status == 200
                    break
            except OSError:
                assert server.poll() is None and time.monotonic() < deadline, "gunicorn did not start"
                time.sleep(0.2)
    finally:
        server.terminate()
        _out, err = server.communicate(timeout=30)
    assert "Using worker: retryops.gunicorn_worker.Worker" in err  # gthread, its refusals in JSON
    assert "Booting worker" in err and err.count("Booting worker") == 1


def test_probes_answer_over_http_while_the_console_redirects_to_https(client, settings):
    settings.SECURE_SSL_REDIRECT = True
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    assert client.get("/healthz").status_code == 200
    redirect = client.get("/admin/login/")
    assert redirect.status_code == 301 and redirect["Location"].startswith("https://")
    assert client.get("/admin/login/", headers={"X-Forwarded-Proto": "https"}).status_code == 200


@pytest.mark.slow
def test_the_worker_class_setting_reaches_every_rqworker_without_a_flag():
    code = ("import django, rq.worker; django.setup(); from django_rq.workers import get_worker_class; "
            "print(get_worker_class() is rq.worker.SimpleWorker)")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60,
                            env={**os.environ, "DJANGO_SETTINGS_MODULE": "retryops.settings",
                                 "RETRYOPS_WORKER_CLASS": "rq.worker.SimpleWorker"})
    assert result.stdout.strip() == "True", result.stderr
