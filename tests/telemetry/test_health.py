"""/healthz and /readyz: what a load balancer sees, with real servers."""

import subprocess
import sys

import httpx
import pytest

from tests.http_server import free_port
from tests.telemetry.processes import ROOT, environment, redis_server, stop, wait_for
from tests.telemetry.test_readiness import forget_latest_migration


def point_queues_at(settings, url: str) -> None:
    settings.RQ_QUEUES = {name: {**config, "URL": url} for name, config in settings.RQ_QUEUES.items()}


def test_healthz_answers_without_the_database_whatever_the_host(client):
    # No `db` fixture: a query here would fail the test. A balancer probes by address.
    response = client.get("/healthz", HTTP_HOST="10.0.3.7")
    assert (response.status_code, response.json()) == (200, {"status": "ok"})


def test_readyz_answers_a_balancer_probing_by_address(client, db, redis_conn):
    assert client.get("/readyz", HTTP_HOST="10.0.3.7").status_code == 200  # not 400: the host is not checked


def test_readyz_is_ready_with_no_worker_scheduler_or_ops_process_running(client, db, redis_conn):
    # A worker deploy, or RQ's scheduler silent for minutes after a Redis failover, must not take the
    # console and the API off the balancer: their liveness is a metric with an alert instead.
    response = client.get("/readyz")
    assert (response.status_code, response.json()) == (200, {
        "status": "ready", "failing": [],
        "checks": {"database": {"state": "ok"}, "migrations": {"state": "ok"}, "redis": {"state": "ok"},
                   "replica": {"state": "off"}}})


def test_readyz_is_never_cached(client, db, redis_conn):
    assert "no-store" in client.get("/readyz")["Cache-Control"]


def test_readyz_reports_a_stopped_redis_stays_ready_and_never_shows_its_password(client, db, settings):
    # The console and the API serve without Redis (the throttles let requests through, a task
    # started waits in the database): taking every web process off the balancer would be the outage.
    with redis_server(password="s3cret-pw") as url:
        point_queues_at(settings, url)
        running_redis = client.get("/readyz")
    stopped_redis = client.get("/readyz")

    assert running_redis.json()["checks"]["redis"] == {"state": "ok"}
    assert (stopped_redis.status_code, stopped_redis.json()["failing"]) == (200, [])
    assert stopped_redis.json()["checks"]["redis"] == {"state": "unreachable"}
    for response in (running_redis, stopped_redis):
        assert "s3cret-pw" not in response.content.decode() and "redis://" not in response.content.decode()


@pytest.mark.slow
def test_with_the_database_down_healthz_still_answers_and_readyz_says_the_database_is_down():
    port, closed = free_port(), free_port()
    env = environment(DATABASE_URL=f"postgresql://postgres@127.0.0.1:{closed}/retryops")
    server = subprocess.Popen([sys.executable, "-m", "gunicorn", "retryops.wsgi:application", "--bind",
                               f"127.0.0.1:{port}", "--workers", "1", "--log-level", "warning"],
                              cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        healthz = wait_for(lambda: _get(f"{base}/healthz"), timeout=60)
        readyz = httpx.get(f"{base}/readyz", timeout=10)
    finally:
        stop(server)
    assert (healthz.status_code, healthz.json()) == (200, {"status": "ok"})
    assert (readyz.status_code, readyz.json()["checks"]["database"]) == (503, {"state": "down"})
    assert readyz.json()["failing"] == ["database"]


def _get(url: str):
    try:
        return httpx.get(url, timeout=5)
    except httpx.TransportError:
        return None


def test_a_probe_of_a_process_that_is_not_ready_logs_no_error(client, db, redis_conn, caplog):
    # A balancer probes every few seconds: Django would log each 503 as an error.
    forget_latest_migration()
    with caplog.at_level("INFO"):
        assert client.get("/readyz").status_code == 503
    assert [record for record in caplog.records if record.name.startswith("django")] == []
