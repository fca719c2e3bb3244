"""PostgreSQL behind PgBouncer in transaction mode, by setting alone: with DATABASE_URL pointing at
the pooler and DB_TRANSACTION_POOLER=true, the claim race and a worker's attempts run through it as
they do straight to PostgreSQL. Without the setting, psycopg's prepared statements of two clients
meet on one server connection."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from retryops.devservices import transaction_pooler
from scheduling import services
from scheduling.choices import TaskState
from tests import servers
from tests.factories import ResourceFactory, ResourcePoolFactory
from tests.required import missing
from tests.resources.test_concurrency import RESOURCES, assert_no_resource_was_shared, run_claimers

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def pgbouncer():
    """Starts a transaction-mode PgBouncer in front of the test database: yields a function of the
    pool size that returns the database URL through it."""
    with_pooler = []

    def start(pool_size: int = 4) -> str:
        try:
            pooler = transaction_pooler(servers.database_url(), pool_size=pool_size)
            url = pooler.__enter__()
        except FileNotFoundError as exc:
            missing(str(exc), install="apt-get install pgbouncer")
        with_pooler.append(pooler)
        return url

    yield start
    for pooler in with_pooler:
        pooler.__exit__(None, None, None)


def through(url: str, **settings: str) -> dict:
    env = {key: value for key, value in os.environ.items() if not key.startswith("DB_")}
    return {**env, "DATABASE_URL": url, "REDIS_URL": servers.redis_url(), **settings}


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_the_claim_race_through_pgbouncer_never_shares_a_resource(pgbouncer):
    pool = ResourcePoolFactory(name="contended")
    ResourceFactory.create_batch(RESOURCES, pool=pool)

    # 4 claimers on 2 server connections: consecutive transactions of one claimer meet different ones.
    results = run_claimers(pool, env=through(pgbouncer(pool_size=2), DB_TRANSACTION_POOLER="true"), processes=4)

    assert_no_resource_was_shared(pool, results, processes=4)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_worker_through_pgbouncer_runs_an_attempt_and_its_retry(redis_conn, pgbouncer, instant_policy, pool, alice):
    task = services.start_task(flow="demo", pool_name=pool, payload={"script": ["TimeoutError: slow", "ok"]},
                               created_by="test", policy="instant")

    worker = subprocess.run([sys.executable, "manage.py", "rqworker", "retries", "flows", "default", "--burst"],
                            cwd=ROOT, env=through(pgbouncer(pool_size=2), DB_TRANSACTION_POOLER="true"),
                            capture_output=True, text=True, timeout=120)

    assert worker.returncode == 0, worker.stderr[-3000:]
    task.refresh_from_db()
    assert task.state == TaskState.SUCCEEDED, worker.stderr[-3000:]
    assert list(task.attempts.order_by("number").values_list("number", "outcome")) == [
        (1, "failed"), (2, "succeeded")]


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_without_the_setting_two_claimers_prepared_statements_meet_on_one_server_connection(pgbouncer):
    pool = ResourcePoolFactory(name="contended")
    ResourceFactory.create_batch(RESOURCES, pool=pool)

    # One server connection for both: each client names its prepared statements _pg3_0, _pg3_1, ...
    results = run_claimers(pool, env=through(pgbouncer(pool_size=1)), processes=2, seconds=1, check=False)

    errors = [result["error"] for result in results if "error" in result]
    assert errors, "both claimers ran through one server connection with prepared statements"
    assert all("prepared statement" in error for error in errors), errors[0][-2000:]
