"""The event stream: audit entries and task events also go to the Redis streams retryops:audit and
retryops:events, for consumers outside the app (flag `audit-streaming`).

An outbox: `add_to_stream` writes a StreamMessage row in the caller's transaction, and
`publish_stream_messages` (a periodic step of the ops process) adds the unpublished rows to their streams
in id order and marks them published. While Redis is down the rows wait; nothing is lost.
Delivery is at least once: a publisher that dies after XADD and before its commit publishes
those rows again, so consumers skip an `id` they have seen (per stream). Each entry has three
fields: `event` (the audit action or task event kind), `id` (the audit entry's or task event's
id) and `data` (the JSON document, docs/standards/events/retry-status-schema.md).

Order: one publisher at a time (a transaction-level advisory lock) reads in id order. A task's
events are written while its row is locked, so their ids follow their commits and they reach
the stream in order; events of different tasks may reach it slightly out of id order when a
later transaction commits first.
"""

import json
import logging
from datetime import timedelta
from functools import cache
from typing import Any

import django_rq
from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.db import connection, transaction
from django.db.models.functions import Now
from django.utils import timezone
from redis import Redis
from redis.exceptions import RedisError

from retryops.errors import BadInput, DomainError
from audit.models import AUDIT_STREAM, STREAMS, AuditEntry, StreamMessage
from retryops import flags

log = logging.getLogger(__name__)

# pg_try_advisory_xact_lock key of the publisher ("RSTR"); any constant no other lock uses.
PUBLISHER_LOCK = 0x52535452
PUBLISH_BATCH = 500
# Published rows are kept this long (to look into what went out), then deleted in batches.
KEEP_PUBLISHED = timedelta(days=1)
PRUNE_BATCH = 5000
# A Redis that does not answer fails the publisher's run fast; the rows wait for the next one.
REDIS_TIMEOUT_SECONDS = 5


def add_to_stream(*, stream: str, event: str, data: dict[str, Any]) -> StreamMessage | None:
    """Queue one stream entry in the caller's transaction, if the flag audit-streaming is on.
    `data` is the entry's JSON document and carries the `id` consumers deduplicate by."""
    if not flags.enabled(flags.AUDIT_STREAMING):
        return None
    if not connection.in_atomic_block:
        raise DomainError(f"add_to_stream({event!r}) must run inside the transaction of the change it describes",
                          code="not_in_transaction", action=event)
    if stream not in STREAMS:
        raise BadInput(f"unknown stream {stream!r}: one of {', '.join(STREAMS)}", field="stream")
    if not isinstance(data, dict) or "id" not in data:
        raise BadInput("a stream entry's data must be a JSON object with an id", field="data")
    return StreamMessage.objects.create(stream=stream, event=event, payload=data)


def stream_audit_entry(entry: AuditEntry) -> StreamMessage | None:
    """Queue an audit entry for retryops:audit (record_audit calls it)."""
    return add_to_stream(stream=AUDIT_STREAM, event=entry.action, data={
        "id": entry.pk, "created_at": entry.created_at, "actor": entry.actor, "channel": entry.channel,
        "action": entry.action,
        "target": {"type": entry.target_type, "id": entry.target_id, "label": entry.target_label},
        "before": entry.before, "after": entry.after, "reason": entry.reason, "request_id": entry.request_id,
        "repairs": entry.repairs,
    })


@cache
def _redis_at(url: str) -> Redis:
    return Redis.from_url(url, socket_timeout=REDIS_TIMEOUT_SECONDS, socket_connect_timeout=REDIS_TIMEOUT_SECONDS)


def stream_redis() -> Redis:
    """The Redis the streams live in: RETRYOPS_STREAM_REDIS_URL, else the queues' Redis."""
    url = settings.RETRYOPS_STREAM_REDIS_URL
    return _redis_at(url) if url else django_rq.get_connection("default")


def entry_fields(message: StreamMessage) -> dict[str, str]:
    """The fields of a message's stream entry: event, id, data."""
    return {"event": message.event, "id": str(message.payload["id"]),
            "data": json.dumps(message.payload, cls=DjangoJSONEncoder, separators=(",", ":"))}


def publish_stream_messages(*, limit: int = PUBLISH_BATCH) -> int | None:
    """Add up to `limit` unpublished messages to their streams, oldest first, and mark them
    published. Returns how many; 0 with nothing to do, None when another publisher is running or
    Redis did not take them (logged; they stay unpublished for the next run)."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise BadInput(f"limit must be a positive whole number, got {limit!r}", field="limit")
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_try_advisory_xact_lock(%s)", [PUBLISHER_LOCK])
            if not cursor.fetchone()[0]:
                return None
        messages = list(StreamMessage.objects.filter(published_at__isnull=True).order_by("id")[:limit])
        if not messages:
            return 0
        maxlen = settings.RETRYOPS_STREAM_MAXLEN
        try:
            # MULTI/EXEC: Redis applies the whole batch or, if the connection drops first, none of it.
            with stream_redis().pipeline(transaction=True) as pipe:
                for message in messages:
                    pipe.xadd(message.stream, entry_fields(message), maxlen=maxlen, approximate=True)
                pipe.execute()
        except RedisError as exc:
            log.warning("%d stream messages not published (from id %d): %s; the next run retries them",
                        len(messages), messages[0].pk, exc)
            return None
        StreamMessage.objects.filter(pk__in=[m.pk for m in messages]).update(published_at=Now())
    return len(messages)


def delete_in_batches(*, table: str, where: str, params: list, order_by: str, batch: int) -> int:
    """Delete the rows of `table` matching `where`, `batch` rows per transaction in `order_by`
    order, so that a large backlog never holds one long lock; how many were deleted."""
    deleted = 0
    while True:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(f"DELETE FROM {table} WHERE id IN (SELECT id FROM {table} WHERE {where} "
                           f"ORDER BY {order_by} LIMIT %s)", [*params, batch])
            count = cursor.rowcount
        deleted += count
        if count < batch:
            return deleted


def prune_published(*, older_than: timedelta = KEEP_PUBLISHED, batch: int = PRUNE_BATCH) -> int:
    """Delete messages published longer than `older_than` ago, `batch` rows per transaction.
    Unpublished rows are never deleted."""
    # Oldest ids first (the primary key): old published rows sit at its start.
    return delete_in_batches(table=StreamMessage._meta.db_table, where="published_at < %s",
                             params=[timezone.now() - older_than], order_by="id", batch=batch)
