"""scheduling.runner: what a worker does with one wake-up, on the real PostgreSQL and Redis."""

from contextlib import contextmanager

import pytest
from django.db import connection

from scheduling import services
from scheduling.choices import AttemptOutcome, TaskState
from scheduling.models import Attempt, Task
from tests.scheduling import helpers
from tests.scheduling.helpers import work

pytestmark = pytest.mark.django_db(transaction=True)


def run_once(flow, pool, payload=None):
    helpers.calls.clear()
    task = services.start_task(flow=flow, pool_name=pool, created_by="test", policy="instant", payload=payload)
    work()
    task.refresh_from_db()
    return task


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
