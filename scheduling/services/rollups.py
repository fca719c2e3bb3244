"""The rollups of attempts, kept by one pass of the ops process, under one mark (AttemptRollupMark):

- FailureRollup: what the failures of each UTC hour and day led to, per (policy, error
  signature), so that "which errors are really transient" reads a few hundred rows per day of its
  window instead of every failure (scheduling.analysis);
- RetryRollup: the retries that ended and that were due and started in each UTC hour, so that
  the acceptance figures read a row per hour of their window (scheduling.selectors.retry_outcomes,
  retry_start_counts). Those rows (a task event, a finished attempt) never change once written,
  so a pass adds the ones its transactions wrote, as the metrics rollup does.

A failure's counts change after it was written: its task retries, dies or succeeds later, a later
run of its business instance succeeds. So a period is not added to but counted again, whole, each
time a change reaches its failures. Which changes did is known from the transactions that wrote
them, as the metrics rollup knows its rows (telemetry.metrics.rollup says why a transaction id
and not a row id): a pass takes the changes written from the mark's `below_xid` up to
pg_snapshot_xmin (every transaction below it has ended), counts again the hours they reached
(scheduling.analysis.CHANGED_HOURS_SQL) and the days of those hours, and moves the mark, in one
transaction. A read counts the hours reached by changes at or above the mark from the attempts
(scheduling.analysis.failure_counts), so it never waits for a pass and is exact whatever the lag.
"""

import time
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from scheduling.analysis import (
    COLUMNS,
    COUNTS,
    FAILURE_CTE,
    MAX_WINDOW_DAYS,
    changed_hours,
    merged,
    sql_params,
)
from scheduling.models import AttemptRollupMark, FailureRollup, RetryRollup
from scheduling.selectors import RETRY_ENDS_SQL, RETRY_STARTS_SQL, retry_sql_params
from scheduling.watermark import day_floor, take_horizon

# pg_try_advisory_xact_lock key of the pass ("RFAI"); any constant no other lock uses.
ROLLUP_LOCK = 0x52464149
# Periods older than the longest window a read may ask for (and a day to spare) are not kept.
KEPT_DAYS = MAX_WINDOW_DAYS + 1

ROLLUP, RETRIES, MARK = FailureRollup._meta.db_table, RetryRollup._meta.db_table, AttemptRollupMark._meta.db_table

_COUNT_HOURS_SQL = f"""
    WITH {FAILURE_CTE}
    INSERT INTO {ROLLUP} (period_start, period_hours, policy_id, signature, {", ".join(COLUMNS)}, latest_attempt_id)
    SELECT date_trunc('hour', started_at, 'UTC'), 1, policy_id, signature, {COUNTS}
    FROM failure GROUP BY 1, 3, 4
"""
# A day is the sum of its hours, read from the rollup itself.
_COUNT_DAYS_SQL = f"""
    INSERT INTO {ROLLUP} (period_start, period_hours, policy_id, signature, {", ".join(COLUMNS)}, latest_attempt_id)
    SELECT day.start, 24, h.policy_id, h.signature, {", ".join(f"sum(h.{c})" for c in COLUMNS)}, max(h.latest_attempt_id)
    FROM unnest(%(days)s::timestamptz[]) AS day(start)
    JOIN {ROLLUP} h ON h.period_hours = 1 AND h.period_start >= day.start AND h.period_start < day.start + interval '1 day'
    GROUP BY 1, 3, 4
"""

# The retries' rows of the hours from %(start)s to %(end)s written by the transactions from %(lo)s to
# %(hi)s, added to their hours.
_ADD_RETRIES_SQL = f"""
    INSERT INTO {RETRIES} AS r (period_start, succeeded, failed, dead, started, late)
    SELECT hour, sum(succeeded), sum(failed), sum(dead), sum(started), sum(late) FROM (
        SELECT date_trunc('hour', created_at, 'UTC') AS hour, succeeded, failed, dead, 0 AS started, 0 AS late
        FROM ({RETRY_ENDS_SQL}) ends
        WHERE xid >= %(lo)s::xid8 AND xid < %(hi)s::xid8 AND created_at >= %(start)s AND created_at < %(end)s
      UNION ALL
        SELECT date_trunc('hour', scheduled_for, 'UTC'), 0, 0, 0, 1, late::int
        FROM ({RETRY_STARTS_SQL}) starts
        WHERE finished_xid >= %(lo)s::xid8 AND finished_xid < %(hi)s::xid8
          AND scheduled_for >= %(start)s AND scheduled_for < %(end)s
    ) added
    GROUP BY hour
    ON CONFLICT (period_start) DO UPDATE SET succeeded = r.succeeded + EXCLUDED.succeeded,
        failed = r.failed + EXCLUDED.failed, dead = r.dead + EXCLUDED.dead, started = r.started + EXCLUDED.started,
        late = r.late + EXCLUDED.late
"""


@dataclass(frozen=True)
class RollupPass:
    """What one pass did: moved the mark from `from_xid` to `to_xid`, counting `hours` hours again
    (`full`: every kept period, the first pass); or nothing (`skipped`: another pass was under way)."""

    skipped: bool
    from_xid: int = 0
    to_xid: int = 0
    hours: int = 0
    full: bool = False
    seconds: float = 0.0


def roll_up_attempts(*, now: datetime | None = None) -> RollupPass:
    """Count again the periods that the changes written since the last pass reached (every kept
    period on the first pass), drop those older than KEPT_DAYS, and move the mark, in one
    transaction; a pass already under way elsewhere makes this one skip rather than wait."""
    started = time.monotonic()
    kept_from = day_floor((now or timezone.now()) - timedelta(days=KEPT_DAYS))
    with transaction.atomic(), connection.cursor() as cursor:
        horizon = take_horizon(cursor, lock=ROLLUP_LOCK, mark=MARK)
        if horizon is None:
            return RollupPass(skipped=True, seconds=time.monotonic() - started)
        lo, hi = horizon
        cursor.execute(f"SELECT kept_from FROM {MARK} WHERE id = 1")
        if cursor.fetchone()[0] is None:  # the first pass: every period kept
            cursor.execute(f"DELETE FROM {ROLLUP}")
            chunks = [[day] for day in _days_from(kept_from)]
            hours = None
        else:
            cursor.execute(f"DELETE FROM {ROLLUP} WHERE period_start < %s", [kept_from])
            hours = sorted(changed_hours(cursor, lo=lo, hi=hi, since=kept_from)) if hi > lo else []
            cursor.execute(f"DELETE FROM {ROLLUP} WHERE period_hours = 1 AND period_start = ANY(%s::timestamptz[])",
                           [hours])
            # A day's hours per statement, as on the first pass: a pass after a long lag (the ops
            # process away, or pg_snapshot_xmin held back) recounts every hour it reached.
            by_day: dict[datetime, list] = {}
            for hour in hours:
                by_day.setdefault(day_floor(hour), []).append((hour, hour + timedelta(hours=1)))
            chunks = list(by_day.values())
        for ranges in chunks:
            starts, ends = merged(ranges)
            cursor.execute(_COUNT_HOURS_SQL, sql_params(lo=starts, hi=ends))
        if hours is None:
            cursor.execute(f"SELECT DISTINCT date_trunc('day', period_start, 'UTC') FROM {ROLLUP}")
            days = [day for (day,) in cursor.fetchall()]
        else:
            days = sorted({day_floor(hour) for hour in hours})
            cursor.execute(f"DELETE FROM {ROLLUP} WHERE period_hours = 24 AND period_start = ANY(%s::timestamptz[])",
                           [days])
        if days:
            cursor.execute(_COUNT_DAYS_SQL, {"days": days})
        _add_retries(cursor, lo=lo, hi=hi, kept_from=kept_from, full=hours is None)
        cursor.execute(f"UPDATE {MARK} SET below_xid = %(hi)s::xid8, kept_from = %(kept)s, grace_seconds = %(grace)s, "
                       "advanced_at = now() WHERE id = 1",
                       {"hi": str(hi), "kept": kept_from, "grace": settings.RETRYOPS_RETRY_SLA_GRACE_SECONDS})
    return RollupPass(skipped=False, from_xid=lo, to_xid=hi, hours=len(hours or ()), full=hours is None,
                       seconds=time.monotonic() - started)


def _days_from(start: datetime) -> list[tuple[datetime, datetime]]:
    """Every kept period a day at a time, the last one open: the first pass counts each in a
    statement of its own, each well within the ops process's statement timeout at any history."""
    days = [(start + timedelta(days=n), start + timedelta(days=n + 1)) for n in range(KEPT_DAYS + 1)]
    return [*days[:-1], (days[-1][0], datetime.max.replace(tzinfo=start.tzinfo))]


def _add_retries(cursor, *, lo: int, hi: int, kept_from: datetime, full: bool) -> None:
    """Add the retries' rows written from `lo` to `hi` to RetryRollup; every row below `hi` on the
    first pass, and when the grace that says which starts were late has changed."""
    cursor.execute(f"SELECT grace_seconds FROM {MARK} WHERE id = 1")
    periods = [(kept_from, datetime.max.replace(tzinfo=kept_from.tzinfo))]
    if full or cursor.fetchone()[0] != settings.RETRYOPS_RETRY_SLA_GRACE_SECONDS:
        cursor.execute(f"DELETE FROM {RETRIES}")
        lo, periods = 0, _days_from(kept_from)
    else:
        cursor.execute(f"DELETE FROM {RETRIES} WHERE period_start < %s", [kept_from])
    for start, end in periods if hi > lo else ():
        cursor.execute(_ADD_RETRIES_SQL, retry_sql_params(lo=str(lo), hi=str(hi), start=start, end=end))
