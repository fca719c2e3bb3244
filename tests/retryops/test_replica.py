"""The read replica (DATABASE_REPLICA_URL): the console's heavy read-only pages read from it, writes
and reads in a transaction never do, and with no replica everything reads the primary. A replica
that does not answer, dies during a page or is too far behind leaves the pages on the primary.

The `replica` alias is mirrored onto the test database, as DATABASE_REPLICA_URL's TEST MIRROR does;
a refused one points at a closed port. tests/retryops/test_replica_streaming.py stops a real one."""

import copy
import json
import logging
import time
from contextlib import contextmanager

import psycopg
import pytest
from django.core.management import call_command
from django.db import DEFAULT_DB_ALIAS, OperationalError, connections, transaction
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from retryops import replica as replicas
from retryops.replica import REPLICA, from_replica, read_alias, replica_reads
from scheduling.models import RetryPolicy
from telemetry.health.readiness import ReplicaCollector
from tests.factories import RetryPolicyFactory
from tests.http_server import free_port
from tests.startup import start_up


@pytest.fixture(autouse=True)
def _replica_health_forgotten():
    """Each test finds the replica anew: a process remembers what it found."""
    replicas.forget_replica_health()
    yield
    replicas.forget_replica_health()


@contextmanager
def replica_alias(blocker, **settings):
    """A `replica` alias, the test database's settings with `settings` over them, for one test
    (with one for every test, each page that reads from it would need it declared). A test case
    refuses to open a connection to an alias that was not there when it was set up: pytest-django's
    `django_db_blocker` lifts that guard meanwhile, as the replica is connected again after a
    failure, in any thread."""
    connections.settings[REPLICA] = {**copy.deepcopy(connections[DEFAULT_DB_ALIAS].settings_dict), **settings}
    try:
        with blocker.unblock():
            yield connections[REPLICA]
    finally:
        connections[REPLICA].close()
        del connections[REPLICA]
        del connections.settings[REPLICA]


@pytest.fixture
def refused_replica(transactional_db, django_db_blocker):
    """A `replica` alias at a loopback port nothing listens on: its connections are refused."""
    with replica_alias(django_db_blocker, HOST="127.0.0.1", PORT=free_port()):
        yield


def replica_warnings(caplog) -> list[str]:
    return [record.getMessage() for record in caplog.records
            if record.name == "retryops.replica" and record.levelno >= logging.WARNING]


@pytest.fixture
def replica(transactional_db, django_db_blocker):
    """A `replica` alias on the test database. Transactional: in a test's transaction every read is
    one in a transaction, which stays on the primary."""
    with replica_alias(django_db_blocker, TEST={"MIRROR": DEFAULT_DB_ALIAS}) as alias:
        yield alias


def tables_read(queries: CaptureQueriesContext) -> str:
    return " ".join(query["sql"] for query in queries.captured_queries)


@pytest.mark.parametrize("page", ["acceptance_figures", "admin:scheduling_retrypolicy_transience"])
def test_the_figures_and_transience_pages_read_their_attempts_from_the_replica(admin_client, replica, page):
    with CaptureQueriesContext(replica) as on_replica, CaptureQueriesContext(connections["default"]) as on_primary:
        answer = admin_client.get(reverse(page))

    assert answer.status_code == 200
    assert "scheduling_attempt" in tables_read(on_replica)
    # The session and the user are the primary's; the attempts are not read there.
    assert "scheduling_attempt" not in tables_read(on_primary)


def test_the_policy_whatif_command_streams_the_attempts_from_the_replica(replica):
    RetryPolicyFactory(name="default", max_attempts=5)

    with CaptureQueriesContext(replica) as on_replica:
        call_command("policy_whatif", "default", "--set", "max_attempts=3", "--json", stdout=open("/dev/null", "w"))

    # The replica's psycopg cursor (streamed) is not Django's, so only the task counts show here.
    assert "scheduling_task" in tables_read(on_replica)


def test_writes_and_reads_in_a_transaction_stay_on_the_primary_inside_replica_reads(replica):
    with replica_reads(), CaptureQueriesContext(replica) as on_replica:
        policy = RetryPolicyFactory(name="written")
        with transaction.atomic():
            RetryPolicy.objects.select_for_update().get(pk=policy.pk)
            assert RetryPolicy.objects.filter(name="written").exists()  # its own write, seen
            assert read_alias() == DEFAULT_DB_ALIAS
        assert read_alias() == REPLICA

    assert on_replica.captured_queries == []


def test_without_replica_reads_every_read_is_the_primarys(replica):
    with CaptureQueriesContext(replica) as on_replica:
        RetryPolicy.objects.count()

    assert read_alias() == DEFAULT_DB_ALIAS
    assert on_replica.captured_queries == []


def test_with_no_replica_configured_the_heavy_reads_stay_on_the_primary(db):
    with replica_reads():
        assert read_alias() == DEFAULT_DB_ALIAS


def test_database_replica_url_adds_a_replica_mirrored_in_the_tests_with_the_primarys_options():
    run = start_up("settings.DATABASES['replica']", REDIS_URL="redis://127.0.0.1:6379/0", DB_TRANSACTION_POOLER="on",
                   DATABASE_REPLICA_URL="postgresql://reader@10.0.0.7:6432/retryops")

    assert run.returncode == 0, run.stderr
    replica = json.loads(run.stdout.splitlines()[-1])
    assert (replica["HOST"], replica["PORT"], replica["USER"], replica["NAME"]) == ("10.0.0.7", 6432, "reader",
                                                                                     "retryops")
    assert replica["TEST"]["MIRROR"] == "default"
    assert replica["DISABLE_SERVER_SIDE_CURSORS"] is True


@pytest.mark.parametrize("url, said", [
    ("nonsense", "DATABASE_REPLICA_URL is not a URL: it must start with postgresql://"),
    ("mysql://reader@10.0.0.7/retryops", "DATABASE_REPLICA_URL must start with postgresql://"),
])
def test_a_bad_database_replica_url_stops_start_up_naming_it(url, said):
    run = start_up(REDIS_URL="redis://127.0.0.1:6379/0", DATABASE_REPLICA_URL=url)

    assert run.returncode != 0
    assert f"ImproperlyConfigured: {said}" in run.stderr


@pytest.mark.parametrize("page", ["acceptance_figures", "admin:scheduling_retrypolicy_transience"])
def test_with_the_replica_refusing_connections_the_pages_answer_from_the_primary(admin_client, refused_replica,
                                                                               page, caplog):
    with CaptureQueriesContext(connections["default"]) as on_primary:
        answer = admin_client.get(reverse(page))

    assert answer.status_code == 200
    assert "scheduling_attempt" in tables_read(on_primary)


def test_a_refused_replica_is_logged_once_and_not_tried_again_on_the_next_pages(admin_client, refused_replica,
                                                                                  caplog):
    with caplog.at_level(logging.INFO, logger="retryops.replica"):
        admin_client.get(reverse("acceptance_figures"))
        tried = replicas.replica_health(check=False)
        admin_client.get(reverse("acceptance_figures"))
        admin_client.get(reverse("admin:scheduling_retrypolicy_transience"))
        assert replicas.replica_health(check=False) is tried  # not checked again within the retry time
        replicas.check_replica()  # tried again, as after RETRYOPS_REPLICA_RETRY_SECONDS: the same outage

    assert len(replica_warnings(caplog)) == 1
    assert "read replica unreachable" in replica_warnings(caplog)[0]
    assert tried.state == replicas.UNREACHABLE


def test_an_unreachable_replica_is_tried_again_after_the_retry_seconds(settings):
    settings.RETRYOPS_REPLICA_RETRY_SECONDS = 30
    now = time.monotonic()
    health = replicas.Health(replicas.UNREACHABLE, checked_at=now - 29)

    assert health.fresh(now)
    assert not replicas.Health(replicas.UNREACHABLE, checked_at=now - 30).fresh(now)


def test_the_replica_dying_during_a_page_ends_in_the_page_read_from_the_primary(admin_client, replica, caplog):
    """The replica's server session is ended (by the server, as a shutdown or a failover does) just
    as the page sends its first read of the attempts to it."""
    def killed_at_the_attempts(execute, sql, params, many, context):
        if "scheduling_attempt" in sql and not killed:
            killed.append(replica.connection.info.backend_pid)
            with connections["default"].cursor() as cursor:
                cursor.execute("SELECT pg_terminate_backend(%s)", killed)
        return execute(sql, params, many, context)

    killed = []
    admin_client.get(reverse("acceptance_figures"))  # the replica checked and found well
    with (caplog.at_level(logging.WARNING, logger="retryops.replica"), replica.execute_wrapper(killed_at_the_attempts),
          CaptureQueriesContext(connections["default"]) as on_primary):
        answer = admin_client.get(reverse("acceptance_figures"))

    assert killed
    assert answer.status_code == 200
    assert "scheduling_attempt" in tables_read(on_primary)
    assert replica_warnings(caplog) == ["a read on the read replica failed; read again on the primary"]


def test_a_read_cancelled_by_the_replicas_statement_timeout_is_raised_not_read_again_on_the_primary(
        transactional_db, django_db_blocker, caplog):
    options = {**connections[DEFAULT_DB_ALIAS].settings_dict["OPTIONS"], "options": "-c statement_timeout=100"}
    runs = []

    def heavy_read():
        runs.append(read_alias())
        with connections[read_alias()].cursor() as cursor:
            cursor.execute("SELECT pg_sleep(2)")

    with (replica_alias(django_db_blocker, TEST={"MIRROR": DEFAULT_DB_ALIAS}, OPTIONS=options),
          caplog.at_level(logging.WARNING, logger="retryops.replica")):
        with pytest.raises(OperationalError) as raised:
            from_replica(heavy_read)
        health = replicas.replica_health(check=False)

    assert isinstance(raised.value.__cause__, psycopg.errors.QueryCanceled)
    assert runs == [REPLICA]
    assert replica_warnings(caplog) == [] and health.state == replicas.OK


@pytest.mark.parametrize(("error", "read_again"), [
    (psycopg.OperationalError("server closed the connection unexpectedly"), True),  # no SQLSTATE
    (psycopg.errors.ConnectionFailure("connection failure"), True),  # 08006
    (psycopg.errors.AdminShutdown("terminating connection due to administrator command"), True),  # 57P01
    (psycopg.errors.SerializationFailure("canceling statement due to conflict with recovery"), True),  # 40001
    (psycopg.errors.QueryCanceled("canceling statement due to statement timeout"), False),  # 57014
    (psycopg.errors.UndefinedTable('relation "x" does not exist'), False),
])
def test_only_a_lost_connection_or_a_recovery_conflict_reads_again_on_the_primary(replica, error, read_again):
    runs = []

    def read():
        runs.append(read_alias())
        if len(runs) == 1:
            raise error

    try:
        from_replica(read)
    except psycopg.Error as raised:
        assert raised is error
    assert runs == ([REPLICA, DEFAULT_DB_ALIAS] if read_again else [REPLICA])


def test_a_replica_that_is_the_primary_itself_is_never_behind_and_is_read(replica, settings):
    settings.RETRYOPS_REPLICA_MAX_LAG_SECONDS = 1

    health = replicas.check_replica()  # pg_is_in_recovery() is false on the test's server

    assert (health.state, health.lag_seconds) == (replicas.OK, 0.0)
    with replica_reads():
        assert read_alias() == REPLICA


@pytest.mark.parametrize("in_recovery, caught_up, replay_age, lag", [
    (False, None, None, 0.0),  # a primary
    (True, True, 3600.0, 0.0),  # idle: nothing replayed for an hour, nothing missing either
    (True, False, 400.0, 400.0),  # behind: the last transaction it replayed is 400 s old
    (True, None, 12.5, 12.5),  # not receiving (no walreceiver, or WAL from an archive)
    (True, False, None, None),  # behind, and nothing replayed since it started: not known
])
def test_the_replication_lag_counts_the_replay_age_only_when_the_replica_is_not_caught_up(
        in_recovery, caught_up, replay_age, lag):
    assert replicas.replication_lag(in_recovery=in_recovery, caught_up=caught_up, replay_age=replay_age) == lag


def test_readyz_reports_a_refused_replica_without_failing_readiness(client, refused_replica, redis_conn):
    from tests.telemetry.processes import wait_for

    body = wait_for(lambda: (b := client.get("/readyz").json())["checks"]["replica"]["state"] != "pending" and b,
                    timeout=20)

    assert body["checks"]["replica"] == {"state": "unreachable", "error": "OperationalError"}
    assert "replica" not in body["failing"]


def test_readyz_and_metrics_say_an_answering_replica_is_read_and_not_behind(client, replica, redis_conn):
    replicas.check_replica()

    assert client.get("/readyz").json()["checks"]["replica"] == {"state": "ok", "lag_seconds": 0.0}
    samples = {sample.name: sample.value for family in ReplicaCollector().collect() for sample in family.samples}
    assert samples == {"retryops_replica_in_use": 1, "retryops_replica_lag_seconds": 0.0}


def test_without_a_replica_readyz_says_off_and_metrics_have_no_replica_sample(client, db, redis_conn):
    assert client.get("/readyz").json()["checks"]["replica"] == {"state": "off"}
    assert [family.samples for family in ReplicaCollector().collect()] == [[], []]
