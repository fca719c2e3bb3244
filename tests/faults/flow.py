"""The fault suite's flow: the shipped http_call flow, after writing down that it ran and when.

Each execution inserts a row (task, attempt id, resource, lease token, started_at) into
faults_execution, a table the suite creates in the test database and reads, and stamps finished_at
and whether the upstream said ok when the flow ends. Two rows for one attempt id is an attempt run
twice; two rows of one task whose [started_at, finished_at] overlap are two executions at once (an
attempt given up as lost while its flow still ran, and the next one started); two rows of one
resource that overlap are a resource held by two flows at once; two rows with ok is a success run
again.
The start is committed before the upstream is called, so an execution cut short by a fault is
counted too; one that never stamps its end died with its process (SIGKILL)."""

import logging
import os

import psycopg
from django.db import connection

from scheduling.flows import FlowContext
from scheduling.flows.http_call import http_call
from scheduling.models import Attempt

log = logging.getLogger(__name__)

TABLE = "faults_execution"
# clock_timestamp(), not now(): now() is the transaction's start, and every worker shares this clock.
CREATE = f"""CREATE TABLE IF NOT EXISTS {TABLE} (
    id bigserial PRIMARY KEY, task_id bigint NOT NULL, attempt_id bigint, attempt_number integer NOT NULL,
    worker text NOT NULL, pid integer NOT NULL, resource_key text, lease_token uuid,
    started_at timestamptz NOT NULL DEFAULT clock_timestamp(), finished_at timestamptz, upstream_ok boolean)"""


def faults_http(context: FlowContext):
    with connection.cursor() as cursor:
        # The attempt's row committed when begin_attempt did, before the flow was called.
        cursor.execute(f"""INSERT INTO {TABLE} (task_id, attempt_id, attempt_number, worker, pid, resource_key,
                                                lease_token)
                           SELECT %(task)s, max(id), %(number)s, coalesce(max(worker), ''), %(pid)s, %(resource)s,
                                  (array_agg(lease_token ORDER BY id DESC))[1]
                           FROM {Attempt._meta.db_table} WHERE task_id = %(task)s AND number = %(number)s
                           RETURNING id""",
                       {"task": context.task_id, "number": context.attempt, "pid": os.getpid(),
                        "resource": context.resource_key})
        execution = cursor.fetchone()[0]
    ok = False
    try:
        result = http_call(context)
        ok = True
        return result
    finally:
        _finished(execution, ok=ok)


def _finished(execution: int, *, ok: bool) -> None:
    """Stamp the execution's end on a connection of its own: the worker's may have been terminated
    by the fault meanwhile, and an error here must not change what the flow returns. A few tries,
    since a fault terminating connections may meet this one too."""
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    for _ in range(3):
        try:
            with psycopg.connect(**params, autocommit=True) as marker:
                marker.execute(f"UPDATE {TABLE} SET finished_at = clock_timestamp(), upstream_ok = %s WHERE id = %s",
                               [ok, execution])
            return
        except psycopg.Error:
            log.warning("faults: could not stamp the end of execution %s; trying again", execution, exc_info=True)
    log.error("faults: execution %s has no end stamped; the suite counts it as still running", execution)
