"""The fault suite's own checks can fail: executions written as rows, as the flow writes them."""

import uuid
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from tests.faults.executions import (
    CREATE,
    TABLE,
    executions_succeeded_twice,
    overlapping_executions,
    overlapping_holders,
    record,
)

pytestmark = [pytest.mark.faults, pytest.mark.django_db]

TASK, OTHER = 7, 8


@pytest.fixture
def executions():
    """Adds an execution of TASK (or `task`): (attempt id, seconds from the start it began, ended or
    None, upstream ok, the resource it ran on)."""
    with connection.cursor() as cursor:
        cursor.execute(CREATE)
    start = timezone.now()

    def add(attempt: int, began: float, ended: float | None, *, ok: bool | None = None, task: int = TASK,
            resource: str | None = None) -> None:
        with connection.cursor() as cursor:
            cursor.execute(f"""INSERT INTO {TABLE} (task_id, attempt_id, attempt_number, worker, pid, resource_key,
                                                    lease_token, started_at, finished_at, upstream_ok)
                               VALUES (%s, %s, %s, 'host-a.1', 1, %s, %s, %s, %s, %s)""",
                           [task, attempt, attempt, resource, uuid.uuid4(), start + timedelta(seconds=began),
                            None if ended is None else start + timedelta(seconds=ended), ok])

    add.start = start
    return add


def test_an_attempt_given_up_while_its_flow_still_ran_overlaps_the_next(executions):
    executions(1, 0, 5)
    executions(2, 4, 6)

    assert [(row[0], row[1], row[4]) for row in overlapping_executions([TASK])] == [(TASK, 1, 2)]


def test_executions_one_after_another_do_not_overlap(executions):
    executions(1, 0, 1)
    executions(2, 2, 3)

    assert overlapping_executions([TASK]) == []


def test_an_execution_with_no_end_overlaps_every_later_one(executions):
    executions(1, 0, None)
    executions(2, 9, 10)

    assert len(overlapping_executions([TASK])) == 1


def test_an_execution_its_worker_was_killed_in_ended_by_the_kill(executions):
    executions(1, 0, None)
    executions(2, 9, 10)

    assert overlapping_executions([TASK], killed_at=executions.start + timedelta(seconds=1)) == []


def test_a_task_the_upstream_said_ok_to_twice_succeeded_twice(executions):
    executions(1, 0, 1, ok=True)
    executions(2, 2, 3, ok=False)
    executions(3, 4, 5, ok=True)

    assert executions_succeeded_twice([TASK]) == [(TASK, 2)]


def test_two_tasks_running_on_one_resource_at_the_same_time_overlap(executions):
    executions(1, 0, 5, resource="alice@x")
    executions(2, 4, 6, task=OTHER, resource="alice@x")

    assert [(row[0], row[1], row[6]) for row in overlapping_holders([TASK, OTHER])] == [("alice@x", TASK, OTHER)]


def test_two_tasks_running_at_once_on_different_resources_do_not_overlap(executions):
    executions(1, 0, 5, resource="alice@x")
    executions(2, 4, 6, task=OTHER, resource="bob@x")

    assert overlapping_holders([TASK, OTHER]) == []


def test_a_resource_whose_holder_was_killed_is_free_from_the_kill(executions):
    executions(1, 0, None, resource="alice@x")
    executions(2, 9, 10, task=OTHER, resource="alice@x")

    assert len(overlapping_holders([TASK, OTHER])) == 1
    assert overlapping_holders([TASK, OTHER], killed_at=executions.start + timedelta(seconds=1)) == []


def test_an_execution_the_upstream_recorded_is_judged_even_without_an_attempt_row():
    # The database may have lost the attempt (or never committed it): the upstream's record still counts.
    start = timezone.now()
    reported = {"task": TASK, "attempt": 1, "pid": 1, "resource": "alice@x", "lease_token": None,
                "fencing_token": None, "started_at": start, "finished_at": None, "ok": None}
    record([reported, {**reported, "task": OTHER, "started_at": start + timedelta(seconds=1),
                       "finished_at": start + timedelta(seconds=2), "ok": True}], [TASK, OTHER])

    assert [(row[0], row[1], row[6]) for row in overlapping_holders([TASK, OTHER])] == [("alice@x", TASK, OTHER)]
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT count(*) FROM {TABLE} WHERE attempt_id IS NULL")
        assert cursor.fetchone()[0] == 2
