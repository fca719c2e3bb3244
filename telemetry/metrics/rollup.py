"""The counters and histograms of /metrics, counted from the database's rows, and their rollup.

Every process that runs a flow or collects a dead letter writes rows (task events, finished
attempts, dead letters) in the transaction that makes them true; /metrics counts those rows, so
its counters are right whatever process, worker or host wrote them, and a restart loses nothing.

Counting every row at each scrape would cost the whole history. Instead a rollup job adds the
counts of the rows written since its last pass to MetricRollup and moves a watermark W, a
transaction id; a scrape answers the rollup plus the live count of the rows at or above W, in ONE
statement, so one snapshot sees the rollup and W together: a pass that commits during a scrape is
seen whole or not at all, and nothing is counted twice or missed. A scrape costs the rows written
since the last pass (a few seconds' worth) and never waits for the job.

Why a transaction id is a safe watermark, not a row id: ids are taken at INSERT and become
visible at COMMIT, so a transaction can commit a lower id after a higher one was counted, and a
"last id seen" cursor would lose it. Transaction ids give a final prefix: each row carries the id of the transaction that wrote it (TaskEvent.xid,
Attempt.finished_xid, DeadLetter.xid). Every transaction still running has an id at or above
pg_snapshot_xmin(pg_current_snapshot()), and every later one gets a higher id; so the rows below
that xmin are final (committed and visible, or rolled back and never visible). A pass counts the
rows in [W, xmin) and sets W = xmin, in one transaction that locks the watermark row. A
transaction left open anywhere on the server holds xmin back: passes then stop moving W, and
scrapes count the rows written since that transaction began, exactly as before.
"""

import time
from dataclasses import dataclass

from django.db import connection, transaction

from compensation.models import DeadLetter
from scheduling.choices import AttemptOutcome, TaskEventKind
from scheduling.models import Attempt, Task, TaskEvent
from scheduling.watermark import take_horizon
from telemetry.metrics.gauges import counted_gauges
from telemetry.metrics.models import MetricGauge, MetricRollup, MetricWatermark

# The counters: which task event each counts, from which attempt number on. A retry is an attempt
# numbered 2 or more, so a failed retry is a task.retry.scheduled or task.dead written for such an
# attempt (what scheduling.selectors.retry_outcomes counts as failed and dead).
EVENT_COUNTERS = (
    (TaskEventKind.RETRY_SCHEDULED, "task_retry_scheduled_total", 0),
    (TaskEventKind.RETRY_SUCCEEDED, "task_retry_success_total", 0),
    (TaskEventKind.RETRY_SCHEDULED, "task_retry_failure_total", 2),
    (TaskEventKind.DEAD, "task_retry_failure_total", 2),
    (TaskEventKind.DEAD, "task_retry_dlq_total", 0),
)
ESCALATED = "task_retry_escalated_total"
COUNTERS = ("task_retry_scheduled_total", "task_retry_success_total", "task_retry_failure_total",
            "task_retry_dlq_total", ESCALATED)

# The histograms' bucket upper bounds, in seconds, chosen for their values: a flow's run takes
# milliseconds to RQ's 10-minute timeout; a retry is late by RQ's scheduler tick (up to a second)
# when all is well and by minutes to an hour when workers are missing; a dead letter is collected
# right after its task's commit (or by the 5-second job), and the operators' notice SLA is 300 s.
ATTEMPT_DURATION = "task_attempt_duration_seconds"
RETRY_LATENESS = "task_retry_lateness_seconds"
DEAD_LETTER_TO_WORK_ORDER = "dead_letter_to_work_order_seconds"
HISTOGRAMS = {
    ATTEMPT_DURATION: (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600),
    RETRY_LATENESS: (0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600),
    DEAD_LETTER_TO_WORK_ORDER: (0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600),
}
# "No error category": a success, or a death before any attempt ran.
NO_CATEGORY = "none"

# pg_try_advisory_xact_lock key of the rollup ("RMET"); any constant no other lock uses.
ROLLUP_LOCK = 0x524D4554

EVENTS, TASKS, ATTEMPTS = TaskEvent._meta.db_table, Task._meta.db_table, Attempt._meta.db_table
DEAD_LETTERS, ROLLUP, MARK = DeadLetter._meta.db_table, MetricRollup._meta.db_table, MetricWatermark._meta.db_table


def _values(rows) -> str:
    """A VALUES list of our own constants (names and numbers, never input)."""
    def literal(value):
        if isinstance(value, tuple):
            return f"ARRAY[{', '.join(repr(float(v)) for v in value)}]::float8[]"
        return repr(value) if isinstance(value, int) else "'" + str(value).replace("'", "''") + "'"
    return ", ".join("(" + ", ".join(literal(v) for v in row) + ")" for row in rows)


_EVENT_MAP = _values((str(kind), metric, first) for kind, metric, first in EVENT_COUNTERS)
EVENT_KINDS = ", ".join(sorted({f"'{kind}'" for kind, _metric, _first in EVENT_COUNTERS}))
# Each histogram's bounds, and the same negated in reverse order: width_bucket(-v, that) is the
# number of bounds at or above v, so a value lands in the first bucket whose bound is >= it
# (Prometheus' "le"), and past the last bound in +Inf.
_BUCKETS = _values((name, bounds, tuple(-b for b in reversed(bounds))) for name, bounds in HISTOGRAMS.items())


def _observed(lo: str, hi: str | None) -> str:
    """One row per observation of the rows written by transactions in [lo, hi) (hi None: no
    upper bound): (metric, flow, pool_id, label, value), value NULL for a counter's. Flow and
    pool come from the task, the category from the attempt the event is about; none of them
    changes once the row is written, so a row counts the same in every scrape and pass. A value
    is never below 0: its two times may come from two hosts' clocks (a worker's and the collector's),
    and a negative one would make the histogram's _sum go down, which OpenMetrics refuses (a
    histogram's _sum is a counter) and rate() reads as a reset."""
    def window(column: str) -> str:
        return f"{column} >= {lo}" + (f" AND {column} < {hi}" if hi else "")

    return f"""
        SELECT m.metric, t.flow, t.pool_id, COALESCE(NULLIF(a.category, ''), '{NO_CATEGORY}') AS label,
               NULL::float8 AS v
        FROM {EVENTS} e
        JOIN (VALUES {_EVENT_MAP}) m(kind, metric, first_attempt)
          ON m.kind = e.kind AND COALESCE(e.attempt_number, 0) >= m.first_attempt
        JOIN {TASKS} t ON t.id = e.task_id
        LEFT JOIN {ATTEMPTS} a ON a.task_id = e.task_id AND a.number = e.attempt_number
        WHERE e.kind IN ({EVENT_KINDS}) AND {window("e.xid")}
      UNION ALL
        SELECT x.metric, t.flow, t.pool_id, x.label, x.v
        FROM {ATTEMPTS} a
        JOIN {TASKS} t ON t.id = a.task_id
        CROSS JOIN LATERAL (VALUES
            ('{ATTEMPT_DURATION}', a.outcome::text, TRUE,
             GREATEST(0, COALESCE(a.duration_ms / 1000.0, EXTRACT(EPOCH FROM a.finished_at - a.started_at)))::float8),
            ('{RETRY_LATENESS}', '', a.number >= 2 AND a.scheduled_for IS NOT NULL,
             GREATEST(0, EXTRACT(EPOCH FROM a.started_at - a.scheduled_for))::float8)
        ) x(metric, label, kept, v)
        WHERE {window("a.finished_xid")} AND a.outcome <> '{AttemptOutcome.RUNNING}' AND x.kept
      UNION ALL
        SELECT x.metric, t.flow, t.pool_id, x.label, x.v
        FROM {DEAD_LETTERS} d
        JOIN {TASKS} t ON t.id = d.task_id
        CROSS JOIN LATERAL (VALUES
            ('{ESCALATED}', COALESCE(NULLIF(t.last_error_category, ''), '{NO_CATEGORY}'), NULL::float8),
            ('{DEAD_LETTER_TO_WORK_ORDER}', '', GREATEST(0, EXTRACT(EPOCH FROM d.created_at - t.finished_at))::float8)
        ) x(metric, label, v)
        WHERE {window("d.xid")}
    """


def _series(lo: str, hi: str | None) -> str:
    """The observations of _observed, counted per series and bucket: (metric, flow, pool_id,
    label, le, count, total)."""
    return f"""
        SELECT o.metric, o.flow, o.pool_id, o.label,
               CASE WHEN b.bounds IS NULL THEN 'Infinity'::float8
                    ELSE (b.bounds || 'Infinity'::float8)[cardinality(b.bounds) - width_bucket(-o.v, b.negated) + 1]
               END AS le,
               count(*) AS n, COALESCE(sum(o.v), 0) AS total
        FROM ({_observed(lo, hi)}) o
        LEFT JOIN (VALUES {_BUCKETS}) b(metric, bounds, negated) ON b.metric = o.metric
        GROUP BY 1, 2, 3, 4, 5
    """


_ROLLUP_SQL = f"""
    INSERT INTO {ROLLUP} AS r (metric, flow, pool_id, label, le, count, total)
    {_series("%(lo)s::xid8", "%(hi)s::xid8")}
    ON CONFLICT (metric, flow, pool_id, label, le)
    DO UPDATE SET count = r.count + EXCLUDED.count, total = r.total + EXCLUDED.total
"""

# The rollup plus the rows at or above its watermark, read in the snapshot the watermark was read
# in (counted_series). The watermark is a parameter, not a subquery: the planner then sees how
# few rows lie above it and walks the xid indexes, where it would plan a scan of a third of each
# table for a value it cannot see.
_SCRAPE_SQL = f"""
    SELECT metric, flow, pool_id, label, le, sum(n)::bigint, sum(total)::float8
    FROM (
        SELECT metric, flow, pool_id, label, le, count AS n, total FROM {ROLLUP}
      UNION ALL
        {_series("%(lo)s::xid8", None)}
    ) s
    GROUP BY 1, 2, 3, 4, 5
"""


@dataclass(frozen=True)
class RollupPass:
    """What one pass did: moved the watermark from `from_xid` to `to_xid`, adding to `series`
    rows of the rollup; or nothing (`skipped`: another pass was under way)."""

    skipped: bool
    from_xid: int = 0
    to_xid: int = 0
    series: int = 0
    seconds: float = 0.0


def roll_up_metrics() -> RollupPass:
    """Add the counts of the rows written since the last pass to the rollup and move the
    watermark, and count the gauges too slow for a scrape, in one transaction; a pass already
    under way elsewhere makes this one skip rather than wait."""
    started = time.monotonic()
    with transaction.atomic(), connection.cursor() as cursor:
        horizon = take_horizon(cursor, lock=ROLLUP_LOCK, mark=MARK)
        if horizon is None:
            return RollupPass(skipped=True, seconds=time.monotonic() - started)
        lo, hi = horizon
        series = 0
        if hi > lo:
            cursor.execute(_ROLLUP_SQL, {"lo": str(lo), "hi": str(hi)})
            series = cursor.rowcount
        cursor.execute(f"UPDATE {MARK} SET below_xid = %(hi)s::xid8, advanced_at = now() WHERE id = 1",
                       {"hi": str(max(lo, hi))})
        # The gauges too slow to group at each scrape, replaced whole (telemetry.metrics.gauges).
        gauges = counted_gauges()
        MetricGauge.objects.all().delete()
        MetricGauge.objects.bulk_create(gauges)
    return RollupPass(skipped=False, from_xid=lo, to_xid=max(lo, hi), series=series,
                      seconds=time.monotonic() - started)


@dataclass(frozen=True)
class Series:
    """One counter series or histogram bucket as the database counts it now."""

    metric: str
    flow: str
    pool_id: int
    label: str
    le: float
    count: int
    total: float


def counted_series() -> list[Series]:
    """Every counter and histogram series: the rollup and its watermark as one pass left them,
    plus the rows above that watermark, all in one snapshot (a repeatable-read transaction), so a
    pass that commits meanwhile is seen whole or not at all."""
    outermost = not connection.in_atomic_block  # inside a caller's transaction, its snapshot rules
    with transaction.atomic(), connection.cursor() as cursor:
        if outermost:
            cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        cursor.execute(f"SELECT below_xid::text FROM {MARK} WHERE id = 1")
        row = cursor.fetchone()
        cursor.execute(_SCRAPE_SQL, {"lo": row[0] if row else "0"})
        return [Series(*row) for row in cursor.fetchall()]

