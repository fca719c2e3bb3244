"""/healthz and /readyz: what a load balancer sees, with real servers, workers and schedulers."""

import subprocess
import sys

import httpx
import pytest

from telemetry.heartbeats import CRON_CONFIGS
from tests.http_server import free_port
from tests.telemetry.processes import (
    ROOT,
    environment,
    redis_server,
    running,
    stop,
    wait_for,
    worker_command,
)


def point_queues_at(settings, url: str) -> None:
    settings.RQ_QUEUES = {name: {**config, "URL": url} for name, config in settings.RQ_QUEUES.items()}


def test_healthz_answers_without_the_database_whatever_the_host(client):
    # No `db` fixture: a query here would fail the test. A balancer probes by address.
    response = client.get("/healthz", HTTP_HOST="10.0.3.7")
    assert (response.status_code, response.json()) == (200, {"status": "ok"})


def test_readyz_answers_a_balancer_probing_by_address(client, db, redis_conn):
    assert client.get("/readyz", HTTP_HOST="10.0.3.7").status_code == 503  # not 400: the host is not checked


def test_readyz_without_workers_is_not_ready_and_names_each_silent_component(client, db, redis_conn):
    response = client.get("/readyz")
    body = response.json()
    assert (response.status_code, body["status"]) == (503, "not_ready")
    assert {name: check["state"] for name, check in body["checks"].items()} == {
        "database": "ok", "migrations": "ok", "invariants": "off", "redis": "ok", "workers": "silent",
        "schedulers": "silent", "replica": "off"}
    assert body["failing"] == ["workers", "schedulers"]
    assert body["checks"]["workers"]["seen"] == {"retries": 0, "flows": 0, "default": 0, "scheduler": 0}
    assert body["silent"] == ["worker:retries", "worker:flows", "worker:default", "worker:scheduler",
                              "scheduler:rq:retries", "scheduler:rq:flows",
                              *(f"scheduler:cron:{config}" for config in CRON_CONFIGS)]


def test_readyz_is_never_cached(client, db, redis_conn):
    assert "no-store" in client.get("/readyz")["Cache-Control"]


def test_readyz_reports_a_stopped_redis_as_not_ready_and_never_shows_its_password(client, db, settings):
    with redis_server(password="s3cret-pw") as url:
        point_queues_at(settings, url)
        running_redis = client.get("/readyz")
    stopped_redis = client.get("/readyz")

    assert running_redis.json()["checks"]["redis"] == {"state": "ok"}
    body = stopped_redis.json()
    assert (stopped_redis.status_code, body["status"]) == (503, "not_ready")
    assert {name: check["state"] for name, check in body["checks"].items()} == {
        "database": "ok", "migrations": "ok", "invariants": "off", "redis": "down", "workers": "unknown",
        "schedulers": "unknown", "replica": "off"}
    assert body["failing"] == ["redis"]
    assert "worker:flows" in body["silent"]
    for response in (running_redis, stopped_redis):
        assert "s3cret-pw" not in response.content.decode() and "redis://" not in response.content.decode()


def test_readyz_for_balancers_is_ready_with_no_worker_scheduler_or_cron_running(client, db, redis_conn):
    # A worker deploy, or RQ's scheduler silent for minutes after a Redis failover, must not take the
    # console and the API off the balancer: the web scope asks only what a web process needs.
    response = client.get("/readyz?scope=web", HTTP_HOST="10.0.3.7")
    assert (response.status_code, response.json()) == (200, {
        "status": "ready", "failing": [],
        "checks": {"database": {"state": "ok"}, "migrations": {"state": "ok"}, "redis": {"state": "ok"},
                   "replica": {"state": "off"}}})
    assert "no-store" in response["Cache-Control"]


def test_readyz_for_balancers_reports_a_stopped_redis_and_stays_ready(client, db, settings):
    # The console and the API serve without Redis (the throttles let requests through, a task
    # started waits in the database): taking every web process off the balancer would be the outage.
    point_queues_at(settings, f"redis://127.0.0.1:{free_port()}/0")  # nothing listens there
    response = client.get("/readyz?scope=web")
    assert (response.status_code, response.json()["failing"]) == (200, [])
    assert response.json()["checks"]["redis"] == {"state": "unreachable"}


@pytest.mark.parametrize("query", ["?scope=workers", "?scope=", "?scope=WEB"])
def test_readyz_refuses_a_scope_it_does_not_know_naming_it(client, db, query):
    response = client.get(f"/readyz{query}")
    assert response.status_code == 400
    assert response.json()["error"].startswith(f"scope={query.removeprefix('?scope=')!r} is not known: use scope=web")


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_readyz_is_ready_with_a_worker_its_scheduler_and_the_crons_running(client, redis_conn):
    with running(worker_command(), *(["rqcron", config] for config in CRON_CONFIGS)):
        response = wait_for(lambda: (answer := client.get("/readyz")).status_code == 200 and answer, timeout=60,
                            every=0.5)
    body = response.json()
    assert (body["status"], body["silent"]) == ("ready", [])
    assert body["checks"]["workers"]["seen"] == {"retries": 1, "flows": 1, "default": 1, "scheduler": 1}
    assert set(body["checks"]["schedulers"]["seen"].values()) == {1}


@pytest.mark.slow
def test_with_the_database_down_healthz_still_answers_and_both_readyz_scopes_say_the_database_is_down():
    port, closed = free_port(), free_port()
    env = environment(DATABASE_URL=f"postgresql://postgres@127.0.0.1:{closed}/retryops")
    server = subprocess.Popen([sys.executable, "-m", "gunicorn", "retryops.wsgi:application", "--bind",
                               f"127.0.0.1:{port}", "--workers", "1", "--log-level", "warning"],
                              cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        healthz = wait_for(lambda: _get(f"{base}/healthz"), timeout=60)
        readyz = httpx.get(f"{base}/readyz", timeout=10)
        for_balancers = httpx.get(f"{base}/readyz?scope=web", timeout=10)
    finally:
        stop(server)
    assert (healthz.status_code, healthz.json()) == (200, {"status": "ok"})
    assert (readyz.status_code, readyz.json()["checks"]["database"]) == (503, {"state": "down"})
    assert (for_balancers.status_code, for_balancers.json()["failing"]) == (503, ["database"])


def _get(url: str):
    try:
        return httpx.get(url, timeout=5)
    except httpx.TransportError:
        return None


def test_a_probe_of_a_process_that_is_not_ready_logs_no_error(client, db, redis_conn, caplog):
    # A balancer probes every few seconds: Django would log each 503 as an error.
    with caplog.at_level("INFO"):
        assert client.get("/readyz").status_code == 503
    assert [record for record in caplog.records if record.name.startswith("django")] == []
