"""Task events: durable rows written in the transaction that makes them true (an outbox that
consumers claim), plus in-process signals sent after commit."""

import re

from django.db import connection, transaction

from audit.models import EVENTS_STREAM
from audit.streaming import add_to_stream
from scheduling.choices import TaskEventKind
from scheduling.errors import BadInput, NotInTransaction
from scheduling.models import Task, TaskEvent, TaskEventDelivery, TaskEventWatermark
from scheduling.signals import BY_KIND

CONSUMER_LENGTH = TaskEventDelivery._meta.get_field("consumer").max_length
_CONSUMER = re.compile(r"^[a-z0-9][a-z0-9_.:-]*$")
MAX_CLAIM = 1000


def emit(task: Task, kind: str, *, attempt_number: int | None = None, **details) -> None:
    """Record a task event in the current transaction; its signal is sent once that commits."""
    row = TaskEvent.objects.create(task=task, kind=kind, attempt_number=attempt_number, details=details)
    add_to_stream(stream=EVENTS_STREAM, event=kind, data={"id": row.pk, "task": task.pk, "kind": kind,
                  "attempt_number": attempt_number, "created_at": row.created_at, "details": details})
    signal = BY_KIND[kind]
    task_id = task.pk
    transaction.on_commit(
        lambda: signal.send(sender=Task, task_id=task_id, attempt_number=attempt_number, details=details), robust=True
    )


# Why a watermark of transaction ids, not of event ids. Ids are taken at INSERT and become
# visible at COMMIT, so a transaction can commit a lower id after a higher one has been processed:
# a "last id seen" cursor loses it, and "every id below the highest processed one is final" is
# never safe to conclude (a transaction that took its xid first can insert later, and one still
# inside its INSERT may hold an id but no xid yet). Transaction ids do give a final prefix: every
# transaction still running has an xid at or above pg_snapshot_xmin(pg_current_snapshot()) (our
# own included), and every future one gets a higher xid. So the set of events whose `xid` is below
# that xmin is complete and visible in this snapshot; once all of them are delivered (committed,
# or delivered in this transaction, which commits with the watermark) they can never matter again.
# Each (consumer, kind) keeps such a bound, `below_xid`; claims look only at the events above it
# (task_event_claim_idx), so a claim costs the events written since the consumer last caught
# up, not every event ever processed. A transaction left open anywhere on the server holds xmin,
# and so the watermark, back: claims then scan what was written since it began, as before.
#
# Picking: per kind, the events above the consumer's watermark that it has not processed
# (task_event_delivery_once), in the order of task_event_claim_idx: by writing transaction, then
# id, which is oldest first as far as commits allow. The row lock (NO KEY UPDATE, so a delivery's
# foreign-key check does not wait on it) with SKIP LOCKED keeps concurrent claimers from taking
# the same event; one that is skipped now is claimed by a later call. It is taken below each
# kind's LIMIT, so locked events do not use up the limit; with several kinds, events locked but
# cut by the final LIMIT wait, undelivered, for this transaction to end. ON CONFLICT makes a second
# delivery a no-op (a claimer whose snapshot predates another's commit).

# "Has the consumer processed event e?", one probe of task_event_delivery_once per event of the
# window. OFFSET 0 keeps it that: the planner cannot guess how small the window above a watermark
# is (a third of the table, it assumes) and would otherwise hash every delivery the consumer ever
# had, which is the cost the watermark exists to avoid.
_DELIVERED = f"""SELECT 1 FROM {TaskEventDelivery._meta.db_table} d
                 WHERE d.consumer = %(consumer)s AND d.event_id = e.id OFFSET 0"""

_PICK_SQL = f"""
    WITH picked AS (
        SELECT w.id
        FROM unnest(%(kinds)s::varchar[]) AS k(kind)
        LEFT JOIN {TaskEventWatermark._meta.db_table} m ON m.consumer = %(consumer)s AND m.kind = k.kind
        CROSS JOIN LATERAL (
            SELECT e.id, e.xid FROM {TaskEvent._meta.db_table} e
            WHERE e.kind = k.kind AND e.xid >= COALESCE(m.below_xid, '0') AND NOT EXISTS ({_DELIVERED})
            ORDER BY e.xid, e.id
            LIMIT %(limit)s
            FOR NO KEY UPDATE SKIP LOCKED
        ) w
        ORDER BY w.xid, w.id
        LIMIT %(limit)s
    )
    INSERT INTO {TaskEventDelivery._meta.db_table} (consumer, event_id, delivered_at)
    SELECT %(consumer)s, id, now() FROM picked
    ON CONFLICT (consumer, event_id) DO NOTHING
    RETURNING event_id
"""

# Advancing, after the pick so that this claim's own deliveries count: each watermark moves up to
# the first event above it that this snapshot does not show delivered (an event another claimer
# holds counts as undelivered: it may roll back), and never past xmin (LEAST ignores the NULL of
# "none"). A watermark another claimer has locked is left to it (SKIP LOCKED): waiting would hold
# this claim until that consumer commits its work. Its value may come from a newer version than
# our snapshot's; the UPDATE only ever raises it. A (consumer, kind) seen for the first time gets
# its row here; only two first claims at once wait for each other (on the unique index).
_ADVANCE_SQL = f"""
    WITH horizon AS (SELECT pg_snapshot_xmin(pg_current_snapshot()) AS xmin),
    locked AS (
        SELECT id FROM {TaskEventWatermark._meta.db_table}
        WHERE consumer = %(consumer)s AND kind = ANY(%(kinds)s)
        FOR NO KEY UPDATE SKIP LOCKED
    ),
    marks AS (
        SELECT k.kind, m.id, COALESCE(m.below_xid, '0') AS below_xid
        FROM unnest(%(kinds)s::varchar[]) AS k(kind)
        LEFT JOIN {TaskEventWatermark._meta.db_table} m ON m.consumer = %(consumer)s AND m.kind = k.kind
        WHERE m.id IS NULL OR m.id IN (SELECT id FROM locked)
    ),
    reach AS (
        SELECT marks.kind, marks.id, LEAST(horizon.xmin, (
            SELECT min(e.xid) FROM {TaskEvent._meta.db_table} e
            WHERE e.kind = marks.kind AND e.xid >= marks.below_xid
              AND NOT EXISTS ({_DELIVERED})
        )) AS below_xid
        FROM marks, horizon
    ),
    moved AS (
        UPDATE {TaskEventWatermark._meta.db_table} w SET below_xid = reach.below_xid, advanced_at = now()
        FROM reach WHERE w.id = reach.id AND reach.below_xid > w.below_xid
    )
    INSERT INTO {TaskEventWatermark._meta.db_table} (consumer, kind, below_xid, advanced_at)
    SELECT %(consumer)s, reach.kind, reach.below_xid, now() FROM reach WHERE reach.id IS NULL
    ON CONFLICT (consumer, kind) DO NOTHING
"""


def claim_task_events(*, consumer: str, kinds: list[str], limit: int = 100) -> list[TaskEvent]:
    """The task events of `kinds` that `consumer` has not processed yet (at most `limit`, oldest
    first, returned in id order), marked processed for it in the caller's transaction: call it
    inside the consumer's own `transaction.atomic()`, do the work, and commit. A consumer that
    fails or crashes before it commits leaves the events for its next claim; each consumer gets
    every event once. Its cost follows the events written since the consumer last caught up."""
    if not isinstance(consumer, str) or len(consumer) > CONSUMER_LENGTH or not _CONSUMER.match(consumer):
        raise BadInput(f"consumer must be a short lowercase name (dead_letters, alerts), got {consumer!r}",
                       field="consumer")
    # Checked one by one before any set() of them: an unhashable element ([["task.dead"]]) is bad
    # input like any other, not a TypeError.
    listed = isinstance(kinds, (list, tuple, set, frozenset))
    if not listed or not kinds or not all(isinstance(kind, str) and kind in TaskEventKind.values for kind in kinds):
        raise BadInput(f"kinds must be task event kinds ({', '.join(TaskEventKind.values)}), got {kinds!r}",
                       field="kinds")
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_CLAIM:
        raise BadInput(f"limit must be a whole number from 1 to {MAX_CLAIM}, got {limit!r}", field="limit")
    if not connection.in_atomic_block:
        raise NotInTransaction("claim_task_events marks events processed: call it inside the consumer's "
                               "transaction.atomic(), so a crash before the commit leaves them unprocessed")
    kinds = sorted(set(kinds))
    with connection.cursor() as cursor:
        cursor.execute(_PICK_SQL, {"consumer": consumer, "kinds": kinds, "limit": limit})
        ids = [row[0] for row in cursor.fetchall()]
        cursor.execute(_ADVANCE_SQL, {"consumer": consumer, "kinds": kinds})
    return list(TaskEvent.objects.filter(pk__in=ids).order_by("id"))



