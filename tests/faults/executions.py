"""What the fault suite judges executions by: the upstream's records of them (tests/faults/flow.py
reports each start and end) copied into a table of the database the deployment uses, beside its
attempts and tasks; then executions of one task at the same time, executions on one resource at
the same time, tasks whose flow succeeded more than once, and dead tasks whose flow succeeded.

Two rows for one attempt id is an attempt run twice; two rows of one task whose [started_at,
finished_at] overlap are two executions at once (an attempt given up as lost while its flow still
ran, and the next one started); two rows of one resource that overlap are a resource held by two
flows at once; two rows with ok is a success run again. Times are the upstream's (the test's
process, whose clock no fault skews)."""

from datetime import datetime

from django.db import connection

from scheduling.models import Attempt, Task

TABLE = "faults_execution"
CREATE = f"""CREATE TABLE IF NOT EXISTS {TABLE} (
    id bigserial PRIMARY KEY, task_id bigint NOT NULL, attempt_id bigint, attempt_number integer NOT NULL,
    worker text NOT NULL, pid integer NOT NULL, resource_key text, lease_token uuid, fencing_token bigint,
    started_at timestamptz NOT NULL, finished_at timestamptz, upstream_ok boolean)"""


def record(executions: list[dict], task_ids: list[int]) -> None:
    """Replace the table's rows of `task_ids` with `executions` (Upstream.executions_of). The
    attempt (its id, worker, and lease token where the flow did not say it) is the one of that
    task and number: an execution without one ran an attempt the database does not know."""
    with connection.cursor() as cursor:
        cursor.execute(CREATE)
        cursor.execute(f"DELETE FROM {TABLE} WHERE task_id = ANY(%s)", [task_ids])
        for e in executions:
            cursor.execute(f"""INSERT INTO {TABLE} (task_id, attempt_id, attempt_number, worker, pid, resource_key,
                                                    lease_token, fencing_token, started_at, finished_at, upstream_ok)
                               SELECT %(task)s, max(id), %(number)s, coalesce(max(worker), ''), %(pid)s, %(resource)s,
                                      coalesce(%(lease)s::uuid, (array_agg(lease_token ORDER BY id DESC))[1]),
                                      %(fencing)s, %(started)s, %(finished)s, %(ok)s
                               FROM {Attempt._meta.db_table} WHERE task_id = %(task)s AND number = %(number)s""",
                           {"task": e["task"], "number": e["attempt"], "pid": e["pid"], "resource": e["resource"],
                            "lease": e["lease_token"], "fencing": e["fencing_token"], "started": e["started_at"],
                            "finished": e["finished_at"], "ok": e.get("ok")})

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


def dead_whose_flow_succeeded(task_ids: list[int]) -> list[int]:
    """Tasks that ended dead although an execution of theirs had the upstream's ok: a success lost."""
    with connection.cursor() as cursor:
        cursor.execute(f"""SELECT DISTINCT e.task_id FROM {TABLE} e JOIN {Task._meta.db_table} t ON t.id = e.task_id
                           WHERE e.task_id = ANY(%s) AND e.upstream_ok AND t.state = 'dead' ORDER BY 1""", [task_ids])
        return [row[0] for row in cursor.fetchall()]
