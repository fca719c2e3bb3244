"""The event stream: audit entries and task events reach retryops:audit and retryops:events from
the StreamMessage outbox, at least once and in order, also after Redis was down."""

import json
import logging
import threading
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.utils import timezone

from audit import streaming
from audit.jobs import publish_stream_job
from audit.models import AuditEntry, StreamMessage
from retryops.errors import BadInput, DomainError
from audit.services import Target, record_audit
from scheduling import services
from scheduling.models import TaskEvent

pytestmark = pytest.mark.django_db(transaction=True)

CLOSED_PORT = "redis://127.0.0.1:1/0"  # nothing answers there


@pytest.fixture
def task(redis_conn, pool, instant_policy):
    return services.start_task(flow="demo", pool_name=pool, created_by="shop", policy="instant")


def entries(redis_conn, stream):
    """A stream's entries as (event, id, data) in stream order."""
    return [(fields[b"event"].decode(), fields[b"id"].decode(), json.loads(fields[b"data"]))
            for _, fields in redis_conn.xrange(stream)]


def audit_reset(target_id):
    with transaction.atomic():
        return record_audit(action="resource.reset", target=Target(type="resources.resource", id=target_id))


def backlog(count):
    """`count` audit stream messages waiting, as Redis being down for a while leaves them."""
    StreamMessage.objects.bulk_create(StreamMessage(stream="retryops:audit", event="resource.reset", payload={"id": n})
                                      for n in range(count))


def test_an_audit_entry_is_queued_for_the_audit_stream_with_its_document(db):
    entry = audit_reset(7)
    message = StreamMessage.objects.get()
    assert (message.stream, message.event, message.published_at) == ("retryops:audit", "resource.reset", None)
    assert message.payload["id"] == entry.pk
    assert message.payload["target"] == {"type": "resources.resource", "id": "7", "label": ""}
    assert message.payload["created_at"] == entry.created_at.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def test_a_task_event_is_queued_for_the_events_stream_with_its_row(task):
    services.cancel_task(task=task, actor="alice", reason="wrong pool")
    event = TaskEvent.objects.get(task=task)
    message = StreamMessage.objects.get(stream="retryops:events")
    assert message.event == "task.cancelled"
    assert message.payload | {"created_at": None} == {
        "id": event.pk, "task": task.pk, "kind": "task.cancelled", "attempt_number": 0, "created_at": None,
        "details": event.details}
    assert StreamMessage.objects.filter(stream="retryops:audit", event="task.cancel").count() == 1


def test_the_stream_message_rolls_back_with_its_change(db):
    with pytest.raises(RuntimeError), transaction.atomic():
        record_audit(action="resource.reset", target=Target(type="resources.resource", id=7))
        raise RuntimeError("the change failed")
    assert not StreamMessage.objects.exists()


def test_with_audit_streaming_off_nothing_is_queued(task, settings):
    settings.RETRYOPS_FLAGS_OFF = frozenset({"audit-streaming"})
    services.cancel_task(task=task, actor="alice")
    assert AuditEntry.objects.filter(action="task.cancel").count() == 1
    assert TaskEvent.objects.filter(task=task).count() == 1
    assert not StreamMessage.objects.exclude(event="task.start").exists()  # started with the flag on


def test_a_message_outside_a_transaction_is_refused(db):
    with pytest.raises(DomainError) as refused:
        streaming.add_to_stream(stream="retryops:events", event="task.dead", data={"id": 1})
    assert refused.value.code == "not_in_transaction"


def test_an_unknown_stream_or_data_without_id_is_refused_naming_the_field(db):
    with transaction.atomic():
        with pytest.raises(BadInput) as bad_stream:
            streaming.add_to_stream(stream="retryops:other", event="task.dead", data={"id": 1})
        with pytest.raises(BadInput) as bad_data:
            streaming.add_to_stream(stream="retryops:events", event="task.dead", data={"task": 1})
    assert (bad_stream.value.details["field"], bad_data.value.details["field"]) == ("stream", "data")
    assert not StreamMessage.objects.exists()


def test_messages_reach_their_streams_once_in_order_with_event_id_and_data(redis_conn, task):
    services.run_task_now(task=task, actor="alice")
    services.cancel_task(task=task, actor="alice")
    assert streaming.publish_stream_messages() == 5
    assert [(e, int(i)) for e, i, _ in entries(redis_conn, "retryops:events")] == list(
        TaskEvent.objects.filter(task=task).order_by("id").values_list("kind", "id"))
    audit = entries(redis_conn, "retryops:audit")
    assert [event for event, _, _ in audit] == ["task.start", "task.run_now", "task.cancel"]
    assert all(data["id"] == int(entry_id) for _, entry_id, data in audit)
    assert not StreamMessage.objects.filter(published_at__isnull=True).exists()
    assert streaming.publish_stream_messages() == 0


def test_while_redis_is_down_messages_wait_and_are_published_once_in_order_when_it_is_back(
        redis_conn, db, settings, caplog):
    for n in range(5):
        audit_reset(n)
    settings.RETRYOPS_STREAM_REDIS_URL = CLOSED_PORT
    with caplog.at_level(logging.WARNING, logger="audit.streaming"):
        assert streaming.publish_stream_messages() is None
        assert publish_stream_job() == 0
    assert "5 stream messages not published" in caplog.text
    assert StreamMessage.objects.filter(published_at__isnull=True).count() == 5
    audit_reset(5)  # written while Redis is down

    settings.RETRYOPS_STREAM_REDIS_URL = ""
    assert publish_stream_job() == 6
    assert [data["target"]["id"] for _, _, data in entries(redis_conn, "retryops:audit")] == [str(n) for n in range(6)]
    assert publish_stream_job() == 0
    assert redis_conn.xlen("retryops:audit") == 6


def test_a_large_backlog_is_published_in_batches_in_id_order(redis_conn, db):
    backlog(1200)
    assert publish_stream_job() == 1200
    ids = [int(entry_id) for _, entry_id, _ in entries(redis_conn, "retryops:audit")]
    assert ids == sorted(ids) and len(ids) == 1200


def test_the_streams_are_trimmed_to_about_their_maximum_length(redis_conn, db, settings):
    settings.RETRYOPS_STREAM_MAXLEN = 10
    backlog(1000)
    assert publish_stream_job() == 1000
    # "~": Redis trims whole nodes of the stream, so it keeps at most a node's worth more.
    node = int(redis_conn.config_get("stream-node-max-entries")["stream-node-max-entries"])
    assert 10 <= redis_conn.xlen("retryops:audit") <= 10 + node
    last = entries(redis_conn, "retryops:audit")[-1]
    assert last[2]["id"] == 999


def test_one_publisher_at_a_time(redis_conn, db):
    audit_reset(1)
    holding, release = threading.Event(), threading.Event()

    def hold_the_lock():
        try:
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_xact_lock(%s)", [streaming.PUBLISHER_LOCK])
                holding.set()
                release.wait(10)
        finally:
            connection.close()

    other = threading.Thread(target=hold_the_lock)
    other.start()
    try:
        assert holding.wait(10)
        assert streaming.publish_stream_messages() is None
    finally:
        release.set()
        other.join()
    assert streaming.publish_stream_messages() == 1


def test_published_messages_older_than_a_day_are_deleted_in_batches_unpublished_ones_never(redis_conn, db):
    for n in range(7):
        audit_reset(n)
    streaming.publish_stream_messages()
    old = timezone.now() - timedelta(days=1, minutes=1)
    ids = list(StreamMessage.objects.order_by("id").values_list("id", flat=True))
    StreamMessage.objects.filter(pk__in=ids[:5]).update(published_at=old)
    StreamMessage.objects.filter(pk=ids[5]).update(published_at=None, created_at=old)  # Redis down since

    assert streaming.prune_published(batch=2) == 5
    assert list(StreamMessage.objects.order_by("id").values_list("id", flat=True)) == ids[5:]
