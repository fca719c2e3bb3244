"""scheduling.runner: what a worker does with one wake-up, on the real PostgreSQL and Redis."""

import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import psutil
import pytest
from django.db import connection
from django.utils import timezone

from resources.choices import EventKind, ResourceState
from resources.models import Resource, ResourceEvent
from retryops.masking import MASK
from scheduling import services
from scheduling.choices import AttemptOutcome, TaskState
from scheduling.flows import flow
from scheduling.models import Attempt, Task
from tests import servers
from tests.factories import ResourceFactory, ResourcePoolFactory
from tests.scheduling import helpers  # noqa: F401  (registers the test flows)
from tests.scheduling.helpers import work

pytestmark = pytest.mark.django_db(transaction=True)


def run_once(flow, pool, payload=None):
    helpers.calls.clear()
    task = services.start_task(flow=flow, pool_name=pool, created_by="test", policy="instant", payload=payload)
    work()
    task.refresh_from_db()
    return task


@flow("huge_secret_result")
def huge_secret_result(context):
    return {"secret_pin": 4111111111111111111, "count": 2**60}


def test_a_huge_integer_under_a_secret_key_in_a_result_is_in_no_storage_note_or_log(redis_conn, alice,
                                                                                    instant_policy, caplog):
    task = run_once("huge_secret_result", alice.pool)
    assert task.result == {"value": {"secret_pin": MASK, "count": str(2**60)},
                           "storage_note": "result.count is an integer of 19 digits, larger than 9007199254740991"}
    assert "flow result changed to be storable" in caplog.text and "4111111111111111111" not in caplog.text


def test_a_nan_in_a_flow_result_keeps_the_success_and_runs_the_flow_once(redis_conn, alice, instant_policy):
    task = run_once("nan_result", alice.pool)
    assert helpers.calls == [(task.pk, 1)]
    assert (task.state, task.attempt_count) == (TaskState.SUCCEEDED, 1)
    assert task.result["value"] == {"x": None, "ok": True}
    assert "result.x is nan" in task.result["storage_note"]
    assert Attempt.objects.get(task=task).outcome == AttemptOutcome.SUCCEEDED


@pytest.mark.parametrize("char, note", [("nul", "NUL character"), ("surrogate", "lone surrogate")])
def test_text_no_column_holds_in_a_flow_result_keeps_the_success_and_runs_the_flow_once(redis_conn, alice,
                                                                                        instant_policy, char, note):
    task = run_once("unstorable_result", alice.pool, {"char": char})
    assert helpers.calls == [(task.pk, 1)]
    assert (task.state, task.attempt_count) == (TaskState.SUCCEEDED, 1)
    assert task.result["value"] == {"name": "a\ufffdb", "k\ufffd": 1}
    assert note in task.result["storage_note"]


@pytest.mark.parametrize("char", ["nul", "surrogate"])
def test_text_no_column_holds_in_an_error_message_is_stored_and_the_task_retried(redis_conn, alice, instant_policy,
                                                                                 char):
    task = run_once("unstorable_error", alice.pool, {"char": char})
    assert helpers.calls == [(task.pk, 1), (task.pk, 2)]
    assert (task.state, task.attempt_count) == (TaskState.SUCCEEDED, 2)
    first = Attempt.objects.get(task=task, number=1)
    assert (first.outcome, first.error_class) == (AttemptOutcome.FAILED, "TimeoutError")
    assert first.error_message == "upstream said \ufffd slow"
    assert first.resource.last_failure_reason == "TimeoutError: upstream said \ufffd slow"


def test_a_flow_result_that_cannot_even_be_printed_keeps_the_success_and_runs_the_flow_once(
        redis_conn, alice, instant_policy):
    task = run_once("unreadable_result", alice.pool)
    assert helpers.calls == [(task.pk, 1)]
    assert (task.state, task.attempt_count) == (TaskState.SUCCEEDED, 1)
    assert task.result["value"] is None and "no repr" in task.result["storage_note"]
    assert Attempt.objects.get(task=task).outcome == AttemptOutcome.SUCCEEDED


def test_a_flow_error_that_cannot_be_printed_still_ends_the_attempt_failed(redis_conn, alice, instant_policy):
    task = run_once("unreadable_error", alice.pool)
    first = Attempt.objects.get(task=task, number=1)
    assert (first.outcome, first.error_class) == (AttemptOutcome.FAILED, "UnreadableError")
    assert "could not be stored" in first.error_message and "no str" in first.error_message
    assert helpers.calls == [(task.pk, 1), (task.pk, 2)]
    assert (task.state, task.attempt_count) == (TaskState.SUCCEEDED, 2)


@contextmanager
def refusing_trigger(table, condition, message):
    """A trigger that makes PostgreSQL refuse an UPDATE of `table` whose new row meets `condition`:
    a write failing for a reason nobody foresaw."""
    with connection.cursor() as cursor:
        cursor.execute(f"""
            CREATE FUNCTION test_refuse() RETURNS trigger AS $$
            BEGIN
                IF {condition} THEN RAISE EXCEPTION '{message}'; END IF;
                RETURN NEW;
            END $$ LANGUAGE plpgsql""")
        cursor.execute(f"CREATE TRIGGER test_refuse BEFORE UPDATE ON {table} FOR EACH ROW EXECUTE FUNCTION test_refuse()")
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f"DROP TRIGGER test_refuse ON {table}")
            cursor.execute("DROP FUNCTION test_refuse()")


def test_a_success_whose_result_the_database_refuses_is_kept_as_a_success_with_a_note(
        redis_conn, alice, instant_policy):
    with refusing_trigger(Task._meta.db_table, "NEW.result ? 'refuse_me'", "result refused"):
        task = run_once("refused_result", alice.pool)
    assert helpers.calls == [(task.pk, 1)]
    assert (task.state, task.attempt_count) == (TaskState.SUCCEEDED, 1)
    assert task.result["value"] is None
    assert "result refused" in task.result["storage_note"]
    assert Attempt.objects.get(task=task).outcome == AttemptOutcome.SUCCEEDED


def test_a_failure_whose_error_the_database_refuses_still_ends_the_attempt_failed(redis_conn, alice,
                                                                                  instant_policy):
    with refusing_trigger(Attempt._meta.db_table, "NEW.error_message LIKE '%refuse me%'", "error message refused"):
        task = run_once("unstorable_error", alice.pool, {"char": "refuse me:"})
    first = Attempt.objects.get(task=task, number=1)
    assert (first.outcome, first.error_class) == (AttemptOutcome.FAILED, "TimeoutError")
    assert "could not be stored" in first.error_message and "error message refused" in first.error_message
    assert helpers.calls == [(task.pk, 1), (task.pk, 2)]
    assert (task.state, task.attempt_count) == (TaskState.SUCCEEDED, 2)


def test_a_success_recorded_on_a_dropped_database_connection_keeps_its_result(redis_conn, alice, instant_policy):
    task = run_once("connection_dropped_then_ok", alice.pool)
    assert helpers.calls == [(task.pk, 1)]
    assert (task.state, task.result) == (TaskState.SUCCEEDED, {"paid": True})


def test_a_failure_recorded_on_a_dropped_database_connection_keeps_its_error_and_verdict(
        redis_conn, alice, instant_policy):
    task = run_once("connection_dropped_then_401", alice.pool)
    assert helpers.calls == [(task.pk, 1)]
    assert task.state == TaskState.DEAD
    assert Attempt.objects.get(task=task).error_message == "HTTP 401 from upstream: credentials revoked"


ROOT = Path(__file__).resolve().parents[2]


def wait_for(condition, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError("timed out waiting")


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_worker_killed_mid_flow_leaves_an_abandoned_attempt_and_the_task_is_retried(redis_conn, instant_policy):
    pool = ResourcePoolFactory(name="short-leases", lease_seconds=2)
    resource = ResourceFactory(pool=pool, key="alice@x")
    task = services.start_task(flow="demo", pool_name=pool, payload={"sleep": 60, "sleep_attempts": [1]},
                               created_by="test", policy="instant")
    env = {**os.environ, "DATABASE_URL": servers.database_url(), "REDIS_URL": servers.redis_url()}
    worker = subprocess.Popen([sys.executable, "manage.py", "rqworker", "flows", "--burst"], cwd=ROOT, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: Attempt.objects.filter(task=task, outcome=AttemptOutcome.RUNNING).exists())
        time.sleep(1.5)  # long enough for the heartbeat to have extended the lease once
        # The worker and its work horse (RQ forks one per job, in a session of its own).
        parent = psutil.Process(worker.pid)
        for process in [*parent.children(recursive=True), parent]:
            process.send_signal(signal.SIGKILL)
    finally:
        worker.wait(timeout=10)
    wait_for(lambda: Resource.objects.get(pk=resource.pk).leased_until < timezone.now(), timeout=10)

    # The first pass sees the lease lapsed; a pass a heartbeat interval (a third of the lease) later takes it.
    abandoned = services.recover_lost_attempts()
    assert abandoned == []
    time.sleep(1)
    abandoned = services.recover_lost_attempts()

    assert [a.task_id for a in abandoned] == [task.pk]
    first = Attempt.objects.get(task=task, number=1)
    assert (first.outcome, first.error_class) == (AttemptOutcome.ABANDONED, "WorkerLost")
    assert Resource.objects.get(pk=resource.pk).state == ResourceState.FAILED
    assert ResourceEvent.objects.filter(resource=resource, kind=EventKind.LEASE_EXPIRED).count() == 1
    assert Task.objects.get(pk=task.pk).state == TaskState.RETRYING
    work()
    task.refresh_from_db()
    assert task.state == TaskState.SUCCEEDED
    assert list(task.attempts.values_list("number", "outcome", "resource__key")) == [
        (1, "abandoned", "alice@x"), (2, "succeeded", "alice@x")]


@pytest.mark.django_db(transaction=True)
def test_the_heartbeat_keeps_a_long_flow_from_being_swept(redis_conn, instant_policy):
    pool = ResourcePoolFactory(name="short-leases", lease_seconds=1)
    ResourceFactory(pool=pool, key="alice@x")
    task = services.start_task(flow="sleep_then_sweep", pool_name=pool, payload={"sleep": 2.5}, created_by="test",
                               policy="instant")
    work()
    task.refresh_from_db()
    assert task.result == {"swept": 0}  # without the heartbeat, the 1 s lease would have run out
    assert task.state == TaskState.SUCCEEDED and task.attempt_count == 1


def test_an_attempt_on_any_resource_of_its_pool_costs_two_statements(redis_conn, alice, instant_policy):
    from scheduling.runner import run_attempt

    task = services.start_task(flow="noop", pool_name=alice.pool, created_by="test", policy="instant")
    sent = []

    def count(execute, sql, params, many, context):
        sent.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(count):
        attempt = run_attempt(task_id=task.pk, attempt_number=1, due=None)
    # One statement starts it (lock, claim, attempt row), a transaction of one statement ends it
    # (success, release): four round trips, where it took five statements in two transactions.
    assert attempt.outcome == AttemptOutcome.SUCCEEDED
    assert len(sent) == 2
    assert Resource.objects.get(pk=alice.pk).state == ResourceState.AVAILABLE
    assert list(ResourceEvent.objects.filter(resource=alice).order_by("id").values_list("kind", flat=True)) == [
        EventKind.CLAIMED, EventKind.RELEASED_SUCCESS]
