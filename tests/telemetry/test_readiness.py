"""/readyz and the data: an unmigrated database is not ready (and no worker starts on it); the
invariant checker's fast checks are counted by the ops process, read-only, within a time budget,
for /metrics."""

import socket
import threading
import time
from datetime import timedelta

import psycopg
import pytest
from django.core.cache import cache
from django.core.management import CommandError, call_command
from django.db import connection
from django.db.migrations.recorder import MigrationRecorder
from django.utils import timezone

from resources.models import Resource
from scheduling.queueing import enqueue_attempt
from telemetry.health import readiness
from tests import servers
from tests.factories import TaskFactory
from tests.telemetry.processes import wait_for


def forget_latest_migration(app: str = "telemetry") -> str:
    """The database as an older release left it: the app's latest migration not applied."""
    latest = MigrationRecorder.Migration.objects.filter(app=app).latest("name")
    latest.delete()
    return f"{app}.{latest.name}"


def expire_lease(resource) -> None:
    Resource.objects.filter(pk=resource.pk).update(leased_until=timezone.now() - timedelta(hours=1), lapse_seen_at=timezone.now() - timedelta(hours=1))


@pytest.fixture(autouse=True)
def cache_on_test_redis(settings):
    """Django's cache, with the checks' report, in the tests' Redis database: set through the
    settings, which makes each thread open it anew, whenever the cache was first opened in this
    process."""
    settings.CACHES = {"default": {**settings.CACHES["default"], "LOCATION": servers.redis_url()}}


def test_readyz_is_not_ready_on_a_database_missing_a_migration_and_names_it(client, db, redis_conn):
    missing = forget_latest_migration()
    response = client.get("/readyz")
    body = response.json()
    assert response.status_code == 503
    assert body["checks"]["migrations"] == {"state": "missing", "count": 1, "missing": [missing],
                                            "hint": "manage.py migrate"}
    assert "migrations" in body["failing"]


def test_readyz_says_a_migrated_database_has_its_migrations(client, db, redis_conn):
    body = client.get("/readyz").json()
    assert body["checks"]["migrations"] == {"state": "ok"}
    assert "migrations" not in body["failing"]


@pytest.mark.parametrize("command", [["rqworker", "default", "--burst"], ["rqworker-pool", "default", "--burst"],
                                     ["ops"]])
def test_a_worker_or_the_ops_process_refuses_to_start_on_a_database_missing_a_migration(db, redis_conn, command):
    missing = forget_latest_migration("scheduling")
    with pytest.raises(CommandError) as refused:
        call_command(*command)
    assert str(refused.value) == f"database not migrated: run manage.py migrate; missing: {missing}"


def test_the_probes_checks_pass_a_clean_database(db, redis_conn):
    report = readiness.check_now()
    assert (report["state"], report["unfinished"]) == ("ok", [])
    assert report["violations"] == dict.fromkeys(readiness.FAST, 0)


def test_the_probes_checks_count_each_violation_and_point_at_the_command(claimed_alice, redis_conn):
    expire_lease(claimed_alice)
    report = readiness.check_now()
    assert report["state"] == "violations"
    assert report["violations"]["lease_holders"] == 1
    assert report["hint"] == "manage.py check_invariants"


@pytest.mark.django_db(transaction=True)
def test_the_probes_checks_give_up_at_their_budget_instead_of_waiting(pool, redis_conn):
    # Another session holds the resources table: every check on it would wait for as long as it does.
    settings_dict = connection.settings_dict
    with psycopg.connect(dbname=settings_dict["NAME"], host=settings_dict["HOST"], port=settings_dict["PORT"],
                         user=settings_dict["USER"]) as blocker:
        blocker.execute(f"LOCK TABLE {Resource._meta.db_table} IN ACCESS EXCLUSIVE MODE")
        report = readiness.check_now(budget_ms=300)
    assert report["state"] == "timeout"
    assert "lease_holders" in report["unfinished"]
    assert report["took_ms"] < 3000


@pytest.fixture
def unanswering_redis(settings):
    """The queues' Redis on a host that drops packets: a TCP server that accepts connections and never
    answers. It lets go of them after 15 s, so that a pass waiting on it (without the fix) still ends."""
    server = socket.create_server(("127.0.0.1", 0))
    accepted = []

    def accept():
        while True:
            try:
                accepted.append(server.accept()[0])
            except OSError:  # closed
                return

    def let_go():
        server.close()
        for conn in accepted:
            conn.close()

    threading.Thread(target=accept, daemon=True).start()
    release = threading.Timer(15, let_go)
    release.start()
    settings.RQ_QUEUES = {name: {**config, "URL": f"redis://127.0.0.1:{server.getsockname()[1]}/0"}
                          for name, config in settings.RQ_QUEUES.items()}
    yield
    release.cancel()
    let_go()


def test_the_probes_checks_end_within_their_budget_on_a_redis_that_never_answers_and_blame_it(db, unanswering_redis):
    # An overdue task: the overdue check reads its RQ job's status from Redis.
    TaskFactory(state="retrying", next_run_at=timezone.now() - timedelta(hours=1), rq_job_id="lost-job")
    started = time.monotonic()
    report = readiness.check_now(budget_ms=500)
    assert time.monotonic() - started < 2
    assert (report["state"], report["error"]) == ("error", "redis: TimeoutError")
    assert "overdue_tasks" in report["unfinished"]


def test_the_probes_overdue_check_reads_rq_jobs_from_the_queues_redis(db, redis_conn,
                                                                     django_capture_on_commit_callbacks):
    past = timezone.now() - timedelta(hours=1)
    task = TaskFactory(state="retrying", next_run_at=past)
    with django_capture_on_commit_callbacks(execute=True):
        assert enqueue_attempt(task_id=task.pk, attempt_number=1, at=past)
    assert readiness.check_now()["violations"]["overdue_tasks"] == 0  # its wake-up is queued


def test_readyz_neither_runs_nor_reports_the_invariant_checks(client, claimed_alice, redis_conn):
    # A data problem is for the metrics and alerts, never a reason to take web processes off the balancer.
    expire_lease(claimed_alice)
    body = client.get("/readyz").json()
    assert (body["status"], "invariants" in body["checks"]) == ("ready", False)
    assert cache.get(readiness.REPORT_KEY) is None


def test_metrics_export_what_the_last_checks_counted(client, claimed_alice, redis_conn):
    assert "retryops_invariant_violations{" not in client.get("/metrics").content.decode()  # not run yet
    expire_lease(claimed_alice)
    assert readiness.check_invariants_job()["violations"]["lease_holders"] == 1
    scraped = client.get("/metrics").content.decode()
    assert 'retryops_invariant_violations{check="lease_holders"} 1.0' in scraped
    assert 'retryops_invariant_violations{check="double_leases"} 0.0' in scraped
