"""Whether the metrics rollup's watermark keeps up (telemetry.metrics.rollup): a pass that runs but
cannot move it, because a transaction left open anywhere on the server holds pg_snapshot_xmin back,
keeps retryops_metrics_rollup_age_seconds low while every scrape counts more rows live. These
gauges, and the metrics_watermark_stuck alert, say so and name what holds it."""

from dataclasses import dataclass
from datetime import datetime

from django.db import connection
from django.utils import timezone
from prometheus_client.core import GaugeMetricFamily

from scheduling.choices import AttemptOutcome
from telemetry.metrics.rollup import ATTEMPTS, DEAD_LETTERS, EVENT_KINDS, EVENTS, MARK

# The rows a pass would roll up that lie at or above the watermark (the same windows as _observed),
# through the same xid indexes as the scrape: task_event_kind_xid_idx, attempt_finished_xid_idx,
# dead_letter_xid_idx. It reads the rows the scrape counts anyway; W is a parameter for the same
# reason as there.
_WAITING_SQL = f"""
    SELECT count(*), min(at) FROM (
        SELECT created_at AS at FROM {EVENTS} WHERE kind IN ({EVENT_KINDS}) AND xid >= %(lo)s::xid8
      UNION ALL
        SELECT finished_at FROM {ATTEMPTS} WHERE finished_xid >= %(lo)s::xid8 AND outcome <> '{AttemptOutcome.RUNNING}'
      UNION ALL
        SELECT created_at FROM {DEAD_LETTERS} WHERE xid >= %(lo)s::xid8
    ) w
"""

# The oldest transaction on the server that has a transaction id, in any database: what holds
# pg_snapshot_xmin, so the watermark, back. A transaction that only read holds a snapshot but no id,
# and holds nothing back. A prepared transaction (PREPARE TRANSACTION) is in no session's row.
# pg_stat_activity is read once per transaction unless its snapshot is cleared first. Never the query text.
# A role without pg_read_all_stats sees other roles' sessions' backend_xid, pid, application_name and
# datname but not their xact_start: the holder is then known and its age in seconds is not, so age
# is its xid's age (transactions begun since), which every role can read.
_HOLDER_SQL = """
    SELECT holder, pid, database, started, age FROM (
        SELECT application_name AS holder, pid, datname AS database, xact_start AS started, age(backend_xid) AS age
        FROM pg_stat_activity WHERE backend_xid IS NOT NULL AND pid <> pg_backend_pid()
      UNION ALL
        SELECT 'prepared transaction ' || gid, NULL, database, prepared, age(transaction) FROM pg_prepared_xacts
    ) t
    ORDER BY age DESC LIMIT 1
"""


@dataclass(frozen=True)
class WatermarkLag:
    """How far the rollup's watermark lags: the rows at or above it that a pass would roll up, when
    the oldest of them was written (None: none waits), and the oldest transaction on the server
    (what holds the watermark back): its application_name (a prepared transaction's gid), pid,
    database, start (None: no transaction holds an id, or the role lacks pg_read_all_stats) and xid
    age in transactions (None: no transaction holds an id)."""

    rows_waiting: int
    oldest_waiting_at: datetime | None
    holder: str | None = None
    holder_pid: int | None = None
    holder_database: str | None = None
    holder_started_at: datetime | None = None
    holder_xid_age: int | None = None

    @property
    def held(self) -> bool:
        """Whether a transaction on the server holds an id, so the watermark, back."""
        return self.holder_xid_age is not None

    def waiting_seconds(self, now: datetime) -> float:
        """How long the oldest row has waited to be rolled up: 0 when none waits, so an idle
        system reads 0 whatever holds the watermark; a few seconds (the pass interval) when all is well."""
        return 0.0 if self.oldest_waiting_at is None else max(0.0, (now - self.oldest_waiting_at).total_seconds())

    def holder_seconds(self, now: datetime) -> float | None:
        """How long the oldest transaction has been open (0: none holds an id; None: one does, but this
        role, without pg_read_all_stats, cannot see when it began)."""
        if not self.held:
            return 0.0
        return None if self.holder_started_at is None else max(0.0, (now - self.holder_started_at).total_seconds())


def watermark_lag() -> WatermarkLag | None:
    """The watermark's lag now (None before the first pass, when there is no watermark yet)."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT below_xid::text FROM {MARK} WHERE id = 1")
        row = cursor.fetchone()
        if row is None:
            return None
        cursor.execute(_WAITING_SQL, {"lo": row[0]})
        waiting, oldest = cursor.fetchone()
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute(_HOLDER_SQL)
        holder = cursor.fetchone() or (None, None, None, None, None)
    return WatermarkLag(waiting, oldest, *holder)


class WatermarkCollector:
    """retryops_metrics_rollup_watermark_age_seconds, retryops_metrics_rollup_rows_waiting and
    retryops_oldest_transaction_age_seconds (absent before the first pass; the last also while the
    holder's start is hidden from the role). The holder's name is in
    the metrics_watermark_stuck alert, never in a label."""

    def collect(self):
        now = timezone.now()
        lag = watermark_lag()
        families = (
            GaugeMetricFamily("retryops_metrics_rollup_watermark_age_seconds",
                              "Seconds the oldest row not yet rolled up has waited (0: none waits). Grows while a "
                              "transaction left open holds the metrics watermark back."),
            GaugeMetricFamily("retryops_metrics_rollup_rows_waiting",
                              "Rows at or above the metrics watermark, which every scrape counts live."),
            GaugeMetricFamily("retryops_oldest_transaction_age_seconds",
                              "Seconds the oldest transaction holding a transaction id on the PostgreSQL server, in "
                              "any database, has been open (0: none; absent while one is open but the app's role, "
                              "without pg_read_all_stats, cannot see when it began): it holds the metrics watermark "
                              "back."),
        )
        if lag is not None:
            for family, value in zip(families, (lag.waiting_seconds(now), lag.rows_waiting, lag.holder_seconds(now))):
                if value is not None:  # unknown is no sample, never a 0 that reads as "none is open"
                    family.add_metric([], value)
        yield from families
