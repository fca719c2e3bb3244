"""PostgreSQL stopped while flows run, longer than a lease: on a PostgreSQL cluster of this
module's own (tests/faults/cluster.py PostgresServer), never the shared server. The deployment's
processes and this test's process both use it; its schema comes from `manage.py migrate`.

The outage lasts 30 s, a typical failover: with the suite's clocks (a 3 s lease, a renewal every
second, the dispatcher and lease sweeper every second) that is ten leases, so every lease held
when the database went has lapsed by PostgreSQL's clock when it returns, and the flows longer and
shorter than the lease end, and try to write their outcome, during the outage."""

import subprocess
import time

import pytest
from django.db import connection

from tests.faults.cluster import PostgresServer
from tests.faults.runs import FaultRun, assert_promise_kept, deployed
from tests.telemetry.processes import environment, manage, wait_for

pytestmark = [pytest.mark.faults, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

OUTAGE_SECONDS = 30


@pytest.fixture
def outage(transactional_db):
    """The deployment on a PostgreSQL of its own, which this process uses too while it runs. Set
    up after the test database and torn down before its flush, which then runs on the test
    database again (on this one, the audit table's trigger refuses TRUNCATE)."""
    postgres = PostgresServer()
    try:
        postgres.create()
        migrate = manage("migrate", "-v0", env=environment(DATABASE_URL=postgres.url), stderr=subprocess.PIPE)
        assert migrate.wait(timeout=300) == 0, migrate.stderr.read()
        shared = connection.settings_dict
        connection.close()
        connection.settings_dict = {**shared, "NAME": "retryops", "HOST": "127.0.0.1", "PORT": str(postgres.port),
                                    "USER": "postgres", "PASSWORD": ""}
        try:
            with deployed(env={"DATABASE_URL": postgres.url}) as deployment:
                deployment.postgres = postgres
                yield deployment
        finally:
            connection.close()
            connection.settings_dict = shared
    finally:
        postgres.discard()


def test_database_stopped_longer_than_the_lease_loses_no_success_and_holds_nothing_twice(outage):
    run = FaultRun(outage, f"PostgreSQL stopped {OUTAGE_SECONDS}s", settle_timeout=OUTAGE_SECONDS + 60)
    outage.upstream.switch("ok")
    # Flows longer than the 3 s lease and shorter ones, one of each running when the database stops.
    longer, shorter = [], []
    for _ in range(3):
        longer += run.start(1, sleep=5)
        shorter += run.start(1, sleep=1.5)
    wait_for(lambda: run.running(longer) and run.running(shorter), timeout=30, every=0.05)
    since = time.monotonic()
    outage.postgres.stop()
    time.sleep(OUTAGE_SECONDS)
    outage.postgres.start()
    connection.close()  # this process's connection died with the server

    result = run.settle(since=since)

    assert_promise_kept(result)
    assert result.succeeded == 6
    assert run.paid_twice() == []
    assert outage.upstream.stale_fencing_tokens(run.task_ids) == []
