"""The fault suite's flow: the shipped http_call flow, after writing down that it ran.

Each execution inserts a row (task, attempt id) into faults_execution, a table the suite creates
in the test database and reads: two rows for one attempt id is an attempt run twice. The row is
committed before the upstream is called, so an execution cut short by a fault is counted too."""

from django.db import connection

from scheduling.flows import FlowContext
from scheduling.flows.http_call import http_call
from scheduling.models import Attempt

TABLE = "faults_execution"
CREATE = f"""CREATE TABLE IF NOT EXISTS {TABLE} (
    id bigserial PRIMARY KEY, task_id bigint NOT NULL, attempt_id bigint, attempt_number integer NOT NULL,
    worker text NOT NULL, recorded_at timestamptz NOT NULL DEFAULT now())"""


def faults_http(context: FlowContext):
    with connection.cursor() as cursor:
        # The attempt's row committed when begin_attempt did, before the flow was called.
        cursor.execute(f"""INSERT INTO {TABLE} (task_id, attempt_id, attempt_number, worker)
                           SELECT %(task)s, max(id), %(number)s, coalesce(max(worker), '')
                           FROM {Attempt._meta.db_table} WHERE task_id = %(task)s AND number = %(number)s""",
                       {"task": context.task_id, "number": context.attempt})
    return http_call(context)
