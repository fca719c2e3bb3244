"""A metrics watermark held back by a transaction left open is seen: the rows waiting above it, how
long the oldest has waited, the oldest transaction on the server and its name, and an alert.

The held transaction is a second session's, as in production (a psql left in BEGIN, a job that
never commits). The server is shared with other test runs, whose transactions hold the watermark
back too for a moment: the tests wait for what they need (mine to be the oldest, a pass past it)."""

import time
from contextlib import contextmanager
from datetime import timedelta

import psycopg
import pytest
from django.db import connection
from django.utils import timezone

from telemetry.alerts.services import FIRED, OK, RESOLVED, evaluate_alert
from telemetry.alerts.models import Alert
from telemetry.alerts.rules import RULES
from telemetry.metrics.rollup import ATTEMPTS, DEAD_LETTERS, EVENTS, MARK, roll_up_metrics
from telemetry.metrics.watermark import WatermarkCollector, watermark_lag
from tests.factories import ResourcePoolFactory, TaskEventFactory, TaskFactory
from tests.telemetry.metrics_helpers import scrape, value

pytestmark = pytest.mark.django_db(transaction=True)

HELD_BY = "forgotten-psql"
WAIT_SECONDS = 60


def second_session() -> psycopg.Connection:
    """Another session on the test database, named HELD_BY, in a repeatable-read transaction that
    has taken its snapshot."""
    settings_dict = connection.settings_dict
    session = psycopg.connect(dbname=settings_dict["NAME"], host=settings_dict["HOST"], port=settings_dict["PORT"],
                              user=settings_dict["USER"], application_name=HELD_BY)
    session.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
    session.execute("SELECT 1")
    return session


@contextmanager
def transaction_left_open():
    """A second session's transaction that has taken a snapshot and a transaction id (one that only
    read holds no id, and holds nothing back); yields it, and commits when done."""
    with second_session() as held:
        held.execute("SELECT pg_current_xact_id()")
        yield held
        held.commit()


# A role like a production app's: it owns no other role's sessions and is not in pg_read_all_stats, so
# pg_stat_activity shows it other sessions' backend_xid but not their xact_start. Roles are the
# server's, not the test database's: it is created once and kept (a concurrent run may create it too).
UNPRIVILEGED = "retryops_test_without_read_all_stats"


@contextmanager
def read_as_a_role_without_pg_read_all_stats():
    """The test's connection reads (only) the watermark's tables as UNPRIVILEGED."""
    with connection.cursor() as cursor:
        cursor.execute(f"DO $$ BEGIN CREATE ROLE {UNPRIVILEGED} NOLOGIN; "
                       "EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $$")
        cursor.execute(f"GRANT SELECT ON {MARK}, {EVENTS}, {ATTEMPTS}, {DEAD_LETTERS} TO {UNPRIVILEGED}")
        cursor.execute(f"SET ROLE {UNPRIVILEGED}")
        try:
            yield
        finally:
            cursor.execute("RESET ROLE")


def successes(n: int) -> None:
    TaskEventFactory.create_batch(n, task=TaskFactory(pool=ResourcePoolFactory(name="accounts")),
                                  kind="task.retry.succeeded", attempt_number=2)


def lag_when(ready, what: str):
    """Pass after pass until the watermark's lag is `ready` (other test runs' transactions come and go)."""
    deadline = time.monotonic() + WAIT_SECONDS
    while True:
        roll_up_metrics()
        lag = watermark_lag()
        if ready(lag):
            return lag
        assert time.monotonic() < deadline, f"{what} not within {WAIT_SECONDS} s: {lag}"
        time.sleep(0.05)


def held_by(session):
    """The lag once `session` is the oldest transaction on the server."""
    pid = session.info.backend_pid
    return lag_when(lambda lag: lag.holder_pid == pid, f"session {pid} the oldest transaction")


def nothing_waits():
    return lag_when(lambda lag: lag.rows_waiting == 0, "every row rolled up")


def test_rows_written_while_a_transaction_is_open_wait_above_the_watermark_and_their_age_grows():
    roll_up_metrics()
    with transaction_left_open() as held:
        successes(3)
        lag = held_by(held)
        now = timezone.now()

        assert lag.rows_waiting == 3
        assert lag.waiting_seconds(now + timedelta(minutes=10)) == pytest.approx(lag.waiting_seconds(now) + 600)
        assert lag.holder == HELD_BY and lag.holder_database == connection.settings_dict["NAME"]


def test_committing_the_open_transaction_lets_the_rollup_take_in_the_rows():
    roll_up_metrics()
    with transaction_left_open() as held:
        successes(3)
        assert held_by(held).rows_waiting == 3

    lag = nothing_waits()

    assert lag.waiting_seconds(timezone.now() + timedelta(hours=1)) == 0


def test_an_idle_system_with_a_transaction_open_does_not_look_stuck():
    roll_up_metrics()
    with transaction_left_open() as held:
        lag = held_by(held)

        assert (lag.rows_waiting, lag.waiting_seconds(timezone.now() + timedelta(hours=1))) == (0, 0)
        assert lag.holder_seconds(timezone.now() + timedelta(hours=1)) >= 3600


def test_a_read_only_transaction_holds_no_rows_back():
    roll_up_metrics()
    with second_session() as reader:
        successes(2)

        lag = nothing_waits()

        assert lag.holder_pid != reader.info.backend_pid


def test_the_scrape_shows_the_rows_waiting_and_the_open_transactions_age():
    roll_up_metrics()
    with transaction_left_open() as held:
        successes(3)
        held_by(held)
        scraped = scrape()

        assert value(scraped, "retryops_metrics_rollup_rows_waiting") == 3
        assert value(scraped, "retryops_metrics_rollup_watermark_age_seconds") >= 0
        assert value(scraped, "retryops_oldest_transaction_age_seconds") > 0
        assert HELD_BY not in str(scraped)  # a name is never a label

    nothing_waits()
    scraped = scrape()
    assert (value(scraped, "retryops_metrics_rollup_rows_waiting"),
            value(scraped, "retryops_metrics_rollup_watermark_age_seconds")) == (0, 0)


def test_a_role_without_pg_read_all_stats_finds_the_open_transaction_and_says_its_age_is_unknown():
    rule = RULES["metrics_watermark_stuck"]
    roll_up_metrics()
    with transaction_left_open() as held:
        successes(3)
        held_by(held)
        with read_as_a_role_without_pg_read_all_stats():
            lag = watermark_lag()
            gauges = {family.name: [sample.value for sample in family.samples]
                      for family in WatermarkCollector().collect()}
            later = timezone.now() + timedelta(minutes=16)
            reading = rule.read(now=later)

        assert (lag.held, lag.holder_pid, lag.holder_started_at) == (True, held.info.backend_pid, None)
        assert lag.holder_seconds(later) is None
        assert gauges["retryops_oldest_transaction_age_seconds"] == []  # unknown, never 0 ("none is open")
        assert gauges["retryops_metrics_rollup_rows_waiting"] == [3]
        detail = rule.describe(reading.facts)
        assert reading.value >= 16 * 60
        assert "no transaction on the server holds it back" not in detail
        assert detail.endswith("the oldest transaction on the server, age unknown (the app's database role needs "
                               f"pg_read_all_stats to see it): {HELD_BY} (pid {held.info.backend_pid}, database "
                               f"{connection.settings_dict['NAME']})")


def test_before_the_first_pass_the_watermark_gauges_are_absent_and_the_alert_cannot_judge():
    scraped = scrape()

    assert not [name for name, _labels in scraped if name.startswith(("retryops_metrics_rollup_watermark",
                                                                      "retryops_metrics_rollup_rows",
                                                                      "retryops_oldest_transaction"))]
    assert RULES["metrics_watermark_stuck"].read(now=timezone.now()).value is None


@pytest.fixture
def stuck_after(settings, no_channels):
    """The alert fires once the oldest row has waited 15 minutes; it resolves a minute after it is
    back at or below 12."""
    settings.RETRYOPS_ALERT_METRICS_WATERMARK_SECONDS = 900
    settings.RETRYOPS_ALERT_CLEAR_RATIO = 0.8
    settings.RETRYOPS_ALERT_CLEAR_SECONDS = 60
    return settings


def test_the_stuck_watermark_alert_fires_naming_the_open_transaction_and_resolves_after_it_commits(stuck_after):
    roll_up_metrics()
    with transaction_left_open() as held:
        successes(3)
        held_by(held)
        later = timezone.now() + timedelta(minutes=16)

        assert evaluate_alert(rule="metrics_watermark_stuck", now=later) == FIRED
        alert = Alert.objects.get(rule="metrics_watermark_stuck")
        assert alert.detail.startswith("3 rows wait for the metrics rollup, the oldest for 16 min")
        assert f"{HELD_BY} (pid {held.info.backend_pid}, database {connection.settings_dict['NAME']})" in alert.detail
        assert "SELECT" not in alert.detail

    nothing_waits()
    assert evaluate_alert(rule="metrics_watermark_stuck", now=later + timedelta(seconds=30)) != FIRED
    assert evaluate_alert(rule="metrics_watermark_stuck", now=later + timedelta(seconds=91)) == RESOLVED


def test_the_stuck_watermark_alert_stays_quiet_on_an_idle_system_with_a_transaction_open(stuck_after):
    roll_up_metrics()
    with transaction_left_open() as held:
        held_by(held)

        assert evaluate_alert(rule="metrics_watermark_stuck", now=timezone.now() + timedelta(hours=1)) == OK


def test_the_stuck_watermark_alert_says_when_nothing_holds_it_back_and_names_a_nameless_holder():
    rule = RULES["metrics_watermark_stuck"]

    assert rule.describe({"waiting": 1, "age": 90, "holder": None}) == \
        "1 row waits for the metrics rollup, the oldest for 90 s; no transaction on the server holds it back"
    assert rule.describe({"waiting": 2, "age": 7300, "holder": {"name": "", "pid": 7, "database": "retryops",
                                                               "age": 7300}}).endswith(
        "the oldest for 2 h; the oldest transaction on the server, open for 2 h: no application_name (pid 7, "
        "database retryops)")
    assert rule.shown(988.4) == "988 s"
