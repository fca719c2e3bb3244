import os

import hypothesis
import pytest
from django.conf import settings
from django.db import connections, transaction
from django.test import TransactionTestCase, override_settings
from django.utils import translation

from audit.models import AuditEntry
from resources import services
from retryops import devservices
from tests import servers
from tests.factories import ResourceFactory, ResourcePoolFactory, RetryPolicyFactory

# The notification tests' receivers and channel settings (pytest-httpserver); the API's clients.
pytest_plugins = ["tests.compensation.notify_fixtures", "tests.api_fixtures"]

# Hypothesis' 200 ms deadline per example is a timing assertion: on these shared two-core machines
# a pure function's example once took longer under load, failing a property that held.
hypothesis.settings.register_profile("retryops", deadline=None)
hypothesis.settings.load_profile("retryops")


def pytest_report_header(config):
    return [f"retryops: {what} from {where}" for what, where in devservices.SOURCES.items()]

@pytest.fixture(autouse=True)
def _default_language():
    """Each test starts in LANGUAGE_CODE: LocaleMiddleware activates the language a request asks for
    in the thread, and nothing deactivates it after the response."""
    yield
    translation.deactivate()


@pytest.fixture(scope="session", autouse=True)
def _quick_passwords():
    """MD5 for every password a test makes: PBKDF2's million rounds cost about a second per hash
    here, and pytest-django's admin_user (behind admin_client, in some 300 tests) hashes one per test.
    The tests prove the console, not the hasher. A test whose user logs in to a server process of
    its own (which reads the real settings) sets the default hashers back (tests/test_up.py)."""
    with override_settings(PASSWORD_HASHERS=["django.contrib.auth.hashers.MD5PasswordHasher"]):
        yield


@pytest.fixture(scope="session", autouse=True)
def _rq_on_test_redis():
    for config in settings.RQ_QUEUES.values():
        config["URL"] = servers.redis_url()
    # The API's throttle counters too (before any test opens the cache).
    settings.CACHES["default"]["LOCATION"] = servers.redis_url()
    os.environ["REDIS_URL"] = servers.redis_url()


@pytest.fixture
def redis_conn():
    import django_rq

    conn = django_rq.get_connection("flows")
    conn.flushdb()
    yield conn
    conn.flushdb()


@pytest.fixture
def pool(db):
    return ResourcePoolFactory(name="accounts", resource_noun="account")


@pytest.fixture
def alice(pool):
    return ResourceFactory(pool=pool, key="alice@x")


@pytest.fixture
def bob(pool):
    return ResourceFactory(pool=pool, key="bob@x")


@pytest.fixture
def claimed_alice(alice):
    return services.claim_by_id(resource_id=alice.pk, holder="task 812")


@pytest.fixture
def instant_policy(db):
    """Retries at once, so a burst worker runs a task's whole life."""
    return RetryPolicyFactory(name="instant", max_attempts=3, initial_delay_seconds=0)


@pytest.fixture
def default_policy(db):
    return RetryPolicyFactory(name="default", max_attempts=5, backoff="exponential", initial_delay_seconds=120,
                              multiplier=2, max_delay_seconds=1800)


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup, django_db_blocker):
    """Transactional tests empty the audit table with TRUNCATE (_quick_table_emptying), which its
    trigger refuses unless the database allows it (audit migration 0002): the test database does.

    Nor does a commit wait for the disk: nothing needs the test database after a crash of its
    server, and transactional tests and the processes they start commit often."""
    from django.db import connection

    name = connection.ops.quote_name(connection.settings_dict["NAME"])
    with django_db_blocker.unblock(), connection.cursor() as cursor:
        cursor.execute(f"ALTER DATABASE {name} SET retryops.audit_truncate_allowed = 'on'")
        cursor.execute(f"ALTER DATABASE {name} SET synchronous_commit = 'off'")
        # This session started before the ALTERs.
        cursor.execute("SET retryops.audit_truncate_allowed = 'on'")
        cursor.execute("SET synchronous_commit = 'off'")


# Left as migrate and post_migrate made them: the emptying below sends no post_migrate to make them again.
KEPT_TABLES = {"django_content_type", "auth_permission"}


def _empty_tables(self) -> None:
    """Each table emptied with a DELETE in one transaction (foreign keys are deferred), the
    append-only audit table with TRUNCATE. Django's flush truncates every table at once, which costs
    PostgreSQL new files for each table and index, and then makes the content types and permissions
    again through post_migrate: ten times as long, after each of some 250 transactional tests."""
    empty_tables(self._databases_names(include_mirrors=False))


def empty_tables(aliases=("default",)) -> None:
    """The tables of the databases `aliases` emptied, as after a transactional test (_empty_tables):
    for fixtures that commit rows for a whole module."""
    for alias in aliases:
        connection = connections[alias]
        tables = connection.introspection.django_table_names(only_existing=True, include_views=False)
        with transaction.atomic(using=alias), connection.cursor() as cursor:
            for table in sorted(set(tables) - KEPT_TABLES):
                verb = "TRUNCATE" if table == AuditEntry._meta.db_table else "DELETE FROM"
                cursor.execute(f"{verb} {connection.ops.quote_name(table)}")


@pytest.fixture(scope="session", autouse=True)
def _quick_table_emptying():
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(TransactionTestCase, "_fixture_teardown", _empty_tables)
        yield
