"""Task events: durable rows written in the transaction that makes them true (an outbox that
consumers claim), plus in-process signals sent after commit."""

import re

from django.db import connection, transaction

from audit.models import EVENTS_STREAM
from audit.streaming import add_to_stream
from scheduling.choices import TaskEventKind
from scheduling.errors import BadInput, NotInTransaction
from scheduling.models import Task, TaskEvent, TaskEventDelivery
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


# Unprocessed events of the consumer's kinds in id order (task_event_kind_id_idx), each checked
# against the consumer's deliveries (task_event_delivery_once). Not a "last id seen" cursor: a
# transaction that commits after a later one leaves a lower id behind a higher one, and the
# anti-join still finds it. The row lock (NO KEY UPDATE, so a delivery's foreign-key check does
# not wait on it) with SKIP LOCKED keeps concurrent claimers from taking the same event; one that
# is skipped now is claimed by a later call. ON CONFLICT makes a second delivery a no-op.
_CLAIM_SQL = f"""
    WITH picked AS (
        SELECT e.id FROM {TaskEvent._meta.db_table} e
        WHERE e.kind = ANY(%(kinds)s)
          AND NOT EXISTS (SELECT 1 FROM {TaskEventDelivery._meta.db_table} d
                          WHERE d.consumer = %(consumer)s AND d.event_id = e.id)
        ORDER BY e.id
        LIMIT %(limit)s
        FOR NO KEY UPDATE OF e SKIP LOCKED
    )
    INSERT INTO {TaskEventDelivery._meta.db_table} (consumer, event_id, delivered_at)
    SELECT %(consumer)s, id, now() FROM picked
    ON CONFLICT (consumer, event_id) DO NOTHING
    RETURNING event_id
"""


def claim_task_events(*, consumer: str, kinds: list[str], limit: int = 100) -> list[TaskEvent]:
    """The task events of `kinds` that `consumer` has not processed yet, oldest first, marked
    processed for it in the caller's transaction: call it inside the consumer's own
    `transaction.atomic()`, do the work, and commit. A consumer that fails or crashes before it
    commits leaves the events for its next claim; each consumer gets every event once."""
    if not isinstance(consumer, str) or len(consumer) > CONSUMER_LENGTH or not _CONSUMER.match(consumer):
        raise BadInput(f"consumer must be a short lowercase name (dead_letters, alerts), got {consumer!r}",
                       field="consumer")
    unknown = sorted(set(kinds) - set(TaskEventKind.values)) if isinstance(kinds, (list, tuple, set)) else [kinds]
    if unknown or not kinds:
        raise BadInput(f"kinds must be task event kinds ({', '.join(TaskEventKind.values)}), got {kinds!r}",
                       field="kinds")
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_CLAIM:
        raise BadInput(f"limit must be a whole number from 1 to {MAX_CLAIM}, got {limit!r}", field="limit")
    if not connection.in_atomic_block:
        raise NotInTransaction("claim_task_events marks events processed: call it inside the consumer's "
                               "transaction.atomic(), so a crash before the commit leaves them unprocessed")
    with connection.cursor() as cursor:
        cursor.execute(_CLAIM_SQL, {"consumer": consumer, "kinds": list(kinds), "limit": limit})
        ids = [row[0] for row in cursor.fetchall()]
    return list(TaskEvent.objects.filter(pk__in=ids).order_by("id"))



