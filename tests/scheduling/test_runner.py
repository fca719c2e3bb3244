"""scheduling.runner: what a worker does with one wake-up, on the real PostgreSQL and Redis."""

import pytest
from django.db import connection

from scheduling import services
from scheduling.choices import AttemptOutcome, TaskState
from scheduling.models import Attempt, Task
from tests.scheduling import helpers
from tests.scheduling.helpers import work

pytestmark = pytest.mark.django_db(transaction=True)


def run_once(flow, pool):
    helpers.calls.clear()
    task = services.start_task(flow=flow, pool_name=pool, created_by="test", policy="instant")
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


def test_a_nul_character_in_a_flow_result_keeps_the_success_and_runs_the_flow_once(redis_conn, alice,
                                                                                   instant_policy):
    task = run_once("nul_result", alice.pool)
    assert helpers.calls == [(task.pk, 1)]
    assert (task.state, task.attempt_count) == (TaskState.SUCCEEDED, 1)
    assert task.result["value"] == {"name": "a\ufffdb", "k\ufffd": 1}
    assert "NUL character" in task.result["storage_note"]


def test_a_nul_character_in_an_error_message_is_stored_and_the_task_retried(redis_conn, alice, instant_policy):
    task = run_once("nul_error", alice.pool)
    assert helpers.calls == [(task.pk, 1), (task.pk, 2)]
    assert (task.state, task.attempt_count) == (TaskState.SUCCEEDED, 2)
    first = Attempt.objects.get(task=task, number=1)
    assert (first.outcome, first.error_class) == (AttemptOutcome.FAILED, "TimeoutError")
    assert first.error_message == "upstream said \ufffd slow"
    assert "\x00" not in task.last_error and task.last_error.startswith("TimeoutError: upstream said")


@pytest.fixture
def result_refusing_trigger(db):
    """A trigger that makes PostgreSQL refuse a task's result holding the key refuse_me: a write
    failing for a reason nobody foresaw."""
    table = Task._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute("""
            CREATE FUNCTION test_refuse_result() RETURNS trigger AS $$
            BEGIN
                IF NEW.result ? 'refuse_me' THEN RAISE EXCEPTION 'result refused'; END IF;
                RETURN NEW;
            END $$ LANGUAGE plpgsql""")
        cursor.execute(f"CREATE TRIGGER test_refuse_result BEFORE UPDATE ON {table} FOR EACH ROW "
                       "EXECUTE FUNCTION test_refuse_result()")
    yield
    with connection.cursor() as cursor:
        cursor.execute(f"DROP TRIGGER test_refuse_result ON {table}")
        cursor.execute("DROP FUNCTION test_refuse_result()")


def test_a_success_whose_result_the_database_refuses_is_kept_as_a_success_with_a_note(
        redis_conn, alice, instant_policy, result_refusing_trigger):
    task = run_once("refused_result", alice.pool)
    assert helpers.calls == [(task.pk, 1)]
    assert (task.state, task.attempt_count) == (TaskState.SUCCEEDED, 1)
    assert task.result["value"] is None
    assert "result refused" in task.result["storage_note"]
    assert Attempt.objects.get(task=task).outcome == AttemptOutcome.SUCCEEDED
