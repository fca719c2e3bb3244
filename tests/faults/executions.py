"""What the fault suite reads from its execution table (tests/faults/flow.py writes it): executions
of one task at the same time, executions on one resource at the same time, and tasks whose flow
succeeded more than once."""

from datetime import datetime

from django.db import connection

from tests.faults.flow import TABLE

# Each execution's span: one without its end stamped ended at the kill if it started before it (its
# worker was SIGKILLed), else is taken as still running.
_SPANS = f"""SELECT id, task_id, attempt_id, resource_key, lease_token, started_at,
                    CASE WHEN finished_at IS NOT NULL THEN finished_at
                         WHEN started_at < %(killed)s THEN %(killed)s
                         ELSE 'infinity' END AS ended_at
             FROM {TABLE} WHERE task_id = ANY(%(tasks)s)"""


def overlapping_executions(task_ids: list[int], *, killed_at: datetime | None = None) -> list[tuple]:
    """Pairs of executions of one task that ran at the same time: (task, attempt id, started,
    ended, the other's attempt id, started, ended). An execution without its end stamped ended by
    `killed_at` if it started before it (its worker was SIGKILLed), else is taken as still running
    (shown as ended None)."""
    with connection.cursor() as cursor:
        cursor.execute(f"""WITH spans AS ({_SPANS})
                           SELECT a.task_id, a.attempt_id, a.started_at, nullif(a.ended_at, 'infinity'),
                                  b.attempt_id, b.started_at, nullif(b.ended_at, 'infinity')
                           FROM spans a JOIN spans b ON a.task_id = b.task_id AND a.id < b.id
                           WHERE a.started_at < b.ended_at AND b.started_at < a.ended_at
                           ORDER BY a.task_id, a.id, b.id""",
                       {"tasks": task_ids, "killed": killed_at})
        return cursor.fetchall()


def overlapping_holders(task_ids: list[int], *, killed_at: datetime | None = None) -> list[tuple]:
    """Pairs of executions on one resource that ran at the same time, whichever their tasks: a
    resource held by two flows at once. (resource, task, attempt id, lease token, started, ended,
    the other's task, attempt id, lease token, started, ended); spans end as in
    overlapping_executions."""
    with connection.cursor() as cursor:
        cursor.execute(f"""WITH spans AS ({_SPANS})
                           SELECT a.resource_key, a.task_id, a.attempt_id, a.lease_token, a.started_at,
                                  nullif(a.ended_at, 'infinity'), b.task_id, b.attempt_id, b.lease_token,
                                  b.started_at, nullif(b.ended_at, 'infinity')
                           FROM spans a JOIN spans b ON a.resource_key = b.resource_key AND a.id < b.id
                           WHERE a.started_at < b.ended_at AND b.started_at < a.ended_at
                           ORDER BY a.resource_key, a.id, b.id""",
                       {"tasks": task_ids, "killed": killed_at})
        return cursor.fetchall()


def executions_succeeded_twice(task_ids: list[int]) -> list[tuple]:
    """(task, executions the upstream said ok to) for each task whose flow succeeded more than once."""
    with connection.cursor() as cursor:
        cursor.execute(f"""SELECT task_id, count(*) FROM {TABLE} WHERE task_id = ANY(%s) AND upstream_ok
                           GROUP BY task_id HAVING count(*) > 1 ORDER BY task_id""", [task_ids])
        return cursor.fetchall()
