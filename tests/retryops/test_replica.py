"""The read replica (DATABASE_REPLICA_URL): the console's heavy read-only pages read from it, writes
and reads in a transaction never do, and with no replica everything reads the primary.

The `replica` alias is mirrored onto the test database, as DATABASE_REPLICA_URL's TEST MIRROR does."""

import copy
import json

import pytest
from django.core.management import call_command
from django.db import DEFAULT_DB_ALIAS, connections, transaction
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from retryops.replica import REPLICA, read_alias, replica_reads
from scheduling.models import RetryPolicy
from tests.factories import RetryPolicyFactory
from tests.startup import start_up


@pytest.fixture
def replica(transactional_db):
    """A `replica` alias on the test database, added for this test only (with one for every test,
    each page that reads from it would need it declared). Connected here: a test case refuses to
    open a connection to an alias it was not told of, not to use one that is open. Transactional:
    in a test's transaction every read is one in a transaction, which stays on the primary."""
    connections.settings[REPLICA] = {**copy.deepcopy(connections[DEFAULT_DB_ALIAS].settings_dict),
                                     "TEST": {"MIRROR": DEFAULT_DB_ALIAS}}
    connections[REPLICA].connect()
    yield connections[REPLICA]
    connections[REPLICA].close()
    del connections[REPLICA]
    del connections.settings[REPLICA]


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
    ("nonsense", "DATABASE_REPLICA_URL is not a database URL"),
    ("mysql://reader@10.0.0.7/retryops", "DATABASE_REPLICA_URL must point at PostgreSQL"),
])
def test_a_bad_database_replica_url_stops_start_up_naming_it(url, said):
    run = start_up(REDIS_URL="redis://127.0.0.1:6379/0", DATABASE_REPLICA_URL=url)

    assert run.returncode != 0
    assert f"ImproperlyConfigured: {said}" in run.stderr
