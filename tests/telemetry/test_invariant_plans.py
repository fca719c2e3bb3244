"""The invariant checker's fast checks run every minute on a million attempts (issue 12), so they
read the big tables through indexes only: every statement they run is planned with sequential
scans discouraged (enable_seqscan = off, so the planner takes an index whenever one can serve
the query), and no plan may still read a big table whole, by a Seq Scan or by walking a whole
index that has no condition to narrow it (a full-index scan reads as many rows)."""

import json
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from compensation.work_orders.models import WorkOrder
from resources.models import ResourcePool
from scheduling.models import RetryPolicy
from telemetry.health.invariants import CHECKS, DEEP, check_invariants
from tests.factories import TaskFactory

pytestmark = pytest.mark.django_db

# Tables a fast check may read whole, each with the reason.
EXEMPT = {
    # One per flow and error signature and incident (the escalation groups dead letters into
    # them), never one per task, but never purged either: the table grows with incidents, by a few
    # thousand rows a year, and audit_rows judges every one of them, so no index can narrow it.
    WorkOrder._meta.db_table: "grows with incidents, not tasks (never purged); every row is checked",
    ResourcePool._meta.db_table: "configuration",
    RetryPolicy._meta.db_table: "configuration",
}
INDEX_SCANS = {"Index Scan", "Index Only Scan", "Bitmap Index Scan"}


def _indexes() -> dict[str, tuple[str, bool]]:
    """Each index's table, and whether it is partial: a scan of a partial index with no condition
    reads only the rows its predicate keeps (task_running_idx: the running tasks), not the table."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexrelid::regclass::text, indrelid::regclass::text, indpred IS NOT NULL FROM pg_index")
        return {name: (table, partial) for name, table, partial in cursor.fetchall()}


def _narrows(condition: str) -> bool:
    """Whether an index condition picks some rows: `resource_id IS NOT NULL` alone walks every
    attempt that ran on a resource."""
    return any(not term.strip("() ").endswith("IS NOT NULL") for term in condition.split(" AND ") if term.strip("() "))


def _whole_table_reads(plan: dict, indexes: dict[str, tuple[str, bool]]) -> list[str]:
    """Each node of `plan` that reads a table not in EXEMPT whole: how it does, and the table."""
    found = []
    node_type = plan.get("Node Type")
    if node_type == "Seq Scan" and plan["Relation Name"] not in EXEMPT:
        found.append(f"Seq Scan on {plan['Relation Name']}")
    elif node_type in INDEX_SCANS and not _narrows(plan.get("Index Cond", "")):
        table, partial = indexes[plan["Index Name"]]
        if not partial and table not in EXEMPT:
            found.append(f"{node_type} of the whole index {plan['Index Name']} on {table}")
    for child in plan.get("Plans", []):
        found.extend(_whole_table_reads(child, indexes))
    return found


def whole_table_reads(sql: str) -> list[str]:
    """Where the plan of `sql` reads a big table whole, with sequential scans discouraged."""
    indexes = _indexes()
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute(f"EXPLAIN (FORMAT JSON) {sql}")
        document = cursor.fetchone()[0]
    (top,) = json.loads(document) if isinstance(document, str) else document
    return _whole_table_reads(top["Plan"], indexes)


def test_every_statement_of_the_fast_checks_reads_the_big_tables_through_an_index():
    # An overdue task with no job: overdue_tasks reads the tasks it found again (its second statement).
    TaskFactory(next_run_at=timezone.now() - timedelta(hours=1), rq_job_id="")
    statements_of = {}
    for name in [name for name in CHECKS if name not in DEEP]:
        with CaptureQueriesContext(connection) as captured:
            (result,) = check_invariants(names=[name])
        statements_of[name] = [query["sql"] for query in captured.captured_queries]
        assert result.name == name
    # Every statement each check can run was captured, so planned below.
    assert {name: len(sqls) for name, sqls in statements_of.items()} == {
        name: 2 if name == "overdue_tasks" else 1 for name in statements_of}
    statements = [sql for sqls in statements_of.values() for sql in sqls]
    offenders = {sql: found for sql in statements if (found := whole_table_reads(sql))}
    assert offenders == {}, "\n\n".join(f"{', '.join(found)} in:\n{sql}" for sql, found in offenders.items())


def test_a_statement_no_index_serves_is_named_with_its_table():
    assert whole_table_reads("SELECT id FROM scheduling_attempt WHERE error_message = 'x'") == [
        "Seq Scan on scheduling_attempt"]


def test_a_walk_of_a_whole_index_is_named_with_its_table():
    # Which index the planner walks (the primary key, task_state_idx) depends on its costs.
    (found,) = whole_table_reads("SELECT id FROM scheduling_task ORDER BY id")
    assert " of the whole index " in found and found.endswith(" on scheduling_task")


def test_an_index_condition_that_only_excludes_nulls_counts_as_a_walk_of_the_whole_index():
    (found,) = whole_table_reads("SELECT id FROM scheduling_attempt WHERE resource_id IS NOT NULL")
    assert found.endswith(" of the whole index attempt_resource_history_idx on scheduling_attempt")
