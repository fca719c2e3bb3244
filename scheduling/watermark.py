"""A rollup's transaction watermark: where a pass over the rows (or changes) written since the last
one starts and ends. Shared by the rollups of attempts and task events: the failure rollup here
(scheduling.services.rollups) and telemetry's metrics rollup (telemetry.metrics.rollup
says why a transaction id and not a row id)."""

from contextlib import contextmanager
from datetime import UTC, datetime

from django.db import connections, transaction


def take_horizon(cursor, *, lock: int, mark: str) -> tuple[int, int] | None:
    """In the caller's transaction: take the rollup's advisory lock `lock` and its watermark row
    (id 1 of the table `mark`, made at 0 on the first pass) and return (lo, hi): the watermark and
    the horizon, every transaction below which has ended (pg_snapshot_xmin); hi >= lo. None when
    another pass holds the lock: it skips rather than waits."""
    # One pass at a time; the lock goes with the transaction. Taken before the watermark row is
    # touched, so that not even the very first passes (both inserting it) wait on each other.
    cursor.execute("SELECT pg_try_advisory_xact_lock(%s)", [lock])
    if not cursor.fetchone()[0]:
        return None
    cursor.execute(f"INSERT INTO {mark} (id, below_xid, advanced_at) VALUES (1, '0', now()) ON CONFLICT (id) DO NOTHING")
    # The horizon comes from this statement's snapshot, taken with the row locked: every
    # transaction below it has ended, so the next statement (a later snapshot) sees all their rows.
    cursor.execute(f"SELECT below_xid::text, pg_snapshot_xmin(pg_current_snapshot())::text FROM {mark} "
                   "WHERE id = 1 FOR UPDATE")
    lo, hi = (int(value) for value in cursor.fetchone())
    return lo, max(lo, hi)


@contextmanager
def snapshot(alias: str):
    """A cursor on `alias` whose statements all read one snapshot (a repeatable-read, read-only
    transaction; inside a caller's transaction, the caller's): a rollup's mark, the rows above it
    and the rollup itself are then seen as one pass left them."""
    outermost = not connections[alias].in_atomic_block
    with transaction.atomic(using=alias), connections[alias].cursor() as cursor:
        if outermost:
            cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        yield cursor


def hour_floor(moment: datetime) -> datetime:
    """The start of the UTC hour of `moment`: the rollups' hours are UTC's, which never merges or
    skips one when daylight saving time changes."""
    return moment.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def day_floor(moment: datetime) -> datetime:
    return hour_floor(moment).replace(hour=0)
