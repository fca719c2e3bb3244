"""Every task event the scheduler writes, and every stream entry the publisher adds, validates
against docs/standards/events/retry-status.schema.json: real tasks on a real worker, the real
publisher, Redis and PostgreSQL."""

import json
from datetime import timedelta
from functools import cache

import pytest
from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.utils import timezone
from jsonschema import Draft202012Validator
from referencing import Registry, Resource

from audit.streaming import publish_stream_messages
import resources.services
from scheduling import services
from scheduling.choices import TaskEventKind
from scheduling.models import TaskEvent
from tests.factories import ResourceFactory
from tests.scheduling.helpers import work

pytestmark = pytest.mark.django_db(transaction=True)

SCHEMA_PATH = settings.BASE_DIR / "docs" / "standards" / "events" / "retry-status.schema.json"


@cache
def schema() -> dict:
    return json.loads(SCHEMA_PATH.read_text())


def validator(definition: str) -> Draft202012Validator:
    """A validator for one of the schema's $defs, with its references resolved inside the file."""
    registry = Registry().with_resource(schema()["$id"], Resource.from_contents(schema()))
    return Draft202012Validator({"$ref": f"{schema()['$id']}#/$defs/{definition}"}, registry=registry,
                                format_checker=Draft202012Validator.FORMAT_CHECKER)


def problems(definition: str, document) -> list[str]:
    return [f"{'/'.join(map(str, error.absolute_path))}: {error.message}"
            for error in validator(definition).iter_errors(document)]


def as_document(event: TaskEvent) -> dict:
    """A TaskEvent row as JSON, as consumers read it."""
    return json.loads(json.dumps({"id": event.pk, "task": event.task_id, "kind": event.kind,
                                  "attempt_number": event.attempt_number, "created_at": event.created_at,
                                  "details": event.details}, cls=DjangoJSONEncoder))


def start(pool, script, policy="instant", **kwargs):
    return services.start_task(flow="demo", pool_name=pool, payload={"script": script}, created_by="schema test",
                               policy=policy, **kwargs)


@pytest.fixture
def every_kind_of_event(redis_conn, pool, alice, instant_policy, default_policy):
    """Tasks that, between them, write every kind of task event."""
    ResourceFactory.create_batch(4, pool=pool)
    start(pool, ["TimeoutError: upstream timed out after 30s", "ok"])            # success after a retry
    start(pool, ["TimeoutError: upstream timed out after 30s"])                  # dead: attempts exhausted
    start(pool, ["PermissionError: HTTP 403 account banned"])                    # dead: non-retryable
    start(pool, ["ConnectionResetError: connection reset by peer"], resource=alice, strict=True)
    waiting = [start(pool, ["TimeoutError: slow", "ok"], policy="default") for _ in range(2)]
    work()
    services.run_task_now(task=waiting[0], actor="alice")                      # run now, then succeeds
    services.cancel_task(task=waiting[1], actor="alice", reason="customer withdrew")
    work()
    late = start(pool, ["ok"])                                                 # a success after it was given up
    started = services.begin_attempt(task_id=late.pk, attempt_number=1)
    resources.services.sweep_expired_leases(now=timezone.now() + timedelta(hours=1))
    services.recover_lost_attempts()
    services.finish_attempt(attempt=started.attempt, result="ok")


def test_every_task_event_row_validates_against_the_schema(every_kind_of_event):
    events = list(TaskEvent.objects.order_by("id"))
    assert {e.kind for e in events} == set(TaskEventKind.values)  # the run covers every kind
    for event in events:
        assert problems("taskEvent", as_document(event)) == [], event


def test_every_stream_entry_validates_against_the_schema(every_kind_of_event, redis_conn):
    root = Draft202012Validator(schema(), format_checker=Draft202012Validator.FORMAT_CHECKER)
    while publish_stream_messages():
        pass
    for stream, definition in (("retryops:events", "taskEvent"), ("retryops:audit", "auditEntry")):
        entries = redis_conn.xrange(stream)
        assert entries, stream
        for _, fields in entries:
            entry = {key.decode(): value.decode() for key, value in fields.items()}
            assert problems("streamEntry", entry) == []
            data = json.loads(entry["data"])
            assert problems(definition, data) == [], entry
            assert (data["id"], data.get("kind", data.get("action"))) == (int(entry["id"]), entry["event"])
            assert root.is_valid(entry) and root.is_valid(data)  # the file's root accepts each document


def test_the_schema_describes_the_details_of_every_task_event_kind():
    task_event = schema()["$defs"]["taskEvent"]
    assert set(task_event["properties"]["kind"]["enum"]) == set(TaskEventKind.values)
    assert {branch["if"]["properties"]["kind"]["const"] for branch in task_event["allOf"]} == set(TaskEventKind.values)


def test_an_event_with_details_the_schema_does_not_know_is_refused():
    """The schema can fail: an undocumented detail or a missing one is caught."""
    event = {"id": 1, "task": 2, "kind": "task.dead", "attempt_number": 3, "created_at": "2026-01-02T03:04:05Z",
             "details": {"reason": "all 3 attempts failed", "signature": "TimeoutError: slow", "resource": 4}}
    assert problems("taskEvent", event) == []
    assert problems("taskEvent", event | {"details": event["details"] | {"new": 1}}) != []
    assert problems("taskEvent", event | {"details": {"reason": "x", "resource": 4}}) != []
    assert problems("taskEvent", event | {"created_at": "yesterday"}) != []
