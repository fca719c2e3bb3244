"""The task-event outbox: every consumer gets every event once, whatever order transactions commit in."""

import threading
import time

import pytest
from django.db import connection, transaction

from retryops.errors import DomainError
from scheduling import services
from scheduling.choices import TaskEventKind
from scheduling.models import TaskEvent, TaskEventWatermark
from tests.scheduling.helpers import in_thread

DEAD = TaskEventKind.DEAD


@pytest.fixture
def task(redis_conn, pool, instant_policy):
    return services.start_task(flow="demo", pool_name=pool, created_by="shop", policy="instant")


def event(task, kind=DEAD) -> TaskEvent:
    return TaskEvent.objects.create(task=task, kind=kind, details={})


def claim(consumer, kinds=(DEAD,), limit=100) -> list[int]:
    with transaction.atomic():
        return [e.pk for e in services.claim_task_events(consumer=consumer, kinds=list(kinds), limit=limit)]


def watermark(consumer, kind=DEAD) -> int | None:
    mark = TaskEventWatermark.objects.filter(consumer=consumer, kind=kind).first()
    return mark and mark.below_xid


@pytest.mark.django_db
def test_each_consumer_gets_every_event_once(task):
    ids = [event(task).pk, event(task).pk]
    assert (claim("dead_letters"), claim("alerts")) == (ids, ids)
    assert (claim("dead_letters"), claim("alerts")) == ([], [])


@pytest.mark.django_db
def test_a_consumer_gets_only_its_kinds(task):
    dead = event(task).pk
    event(task, TaskEventKind.RETRY_SCHEDULED)
    assert claim("dead_letters") == [dead]


@pytest.mark.django_db(transaction=True)
def test_a_claim_outside_a_transaction_is_refused(task):
    event(task)
    with pytest.raises(DomainError) as refused:
        services.claim_task_events(consumer="alerts", kinds=[DEAD], limit=10)
    assert refused.value.code == "needs_transaction"


@pytest.mark.django_db
@pytest.mark.parametrize("kwargs, field", [
    ({"consumer": " ", "kinds": [DEAD]}, "consumer"),
    ({"consumer": "alerts", "kinds": ["task.exploded"]}, "kinds"),
    ({"consumer": "alerts", "kinds": [DEAD], "limit": 0}, "limit"),
    ({"consumer": "alerts", "kinds": [[DEAD]]}, "kinds"),
    ({"consumer": "alerts", "kinds": [{"kind": DEAD}]}, "kinds"),
    ({"consumer": "alerts", "kinds": DEAD}, "kinds"),
    ({"consumer": "alerts", "kinds": [DEAD], "limit": 10.0}, "limit"),
])
def test_bad_claim_arguments_are_refused_by_name(kwargs, field):
    with pytest.raises(DomainError) as refused, transaction.atomic():
        services.claim_task_events(**kwargs)
    assert (refused.value.code, refused.value.details["field"]) == ("bad_input", field)


@pytest.mark.django_db
def test_a_rolled_back_consumer_leaves_its_events_for_the_next_claim(task):
    ids = [event(task).pk]

    class Crash(Exception):
        pass

    with pytest.raises(Crash), transaction.atomic():
        assert [e.pk for e in services.claim_task_events(consumer="dead_letters", kinds=[DEAD])] == ids
        raise Crash  # the consumer failed before committing its work

    assert claim("dead_letters") == ids


@pytest.mark.django_db(transaction=True)
def test_concurrent_claimers_never_get_the_same_event(task):
    claim("alerts")  # the watermark row exists, so the second claimer does not wait (lock_timeout) on its insert
    ids = [event(task).pk for _ in range(4)]
    held, release, first = threading.Event(), threading.Event(), []

    def slow_consumer():
        with transaction.atomic():
            first.extend(e.pk for e in services.claim_task_events(consumer="alerts", kinds=[DEAD], limit=2))
            held.set()
            release.wait(10)

    thread = in_thread(slow_consumer)
    assert held.wait(10)
    second = claim("alerts")
    release.set()
    thread.join(10)
    assert first == ids[:2] and second == ids[2:]
    assert claim("alerts") == []


@pytest.mark.django_db(transaction=True)
def test_an_event_committed_after_a_later_one_is_still_delivered(task):
    inserted, commit = threading.Event(), threading.Event()
    slow = []

    def slow_writer():
        with transaction.atomic():
            slow.append(event(task).pk)  # takes the lower id, commits last
            inserted.set()
            commit.wait(10)

    thread = in_thread(slow_writer)
    assert inserted.wait(10)
    fast = event(task).pk
    assert claim("dead_letters") == [fast]  # the lower id is not visible yet
    commit.set()
    thread.join(10)
    assert slow[0] < fast
    assert claim("dead_letters") == slow


@pytest.mark.django_db(transaction=True)
def test_an_event_inserted_first_by_a_younger_transaction_is_delivered_when_it_commits(task):
    # The older transaction (lower xid) inserts and commits after the younger one inserted: its
    # event's xid is below the younger event's, but its id is above. A watermark that passed every
    # id whose writer had ended would skip the younger, lower id.
    has_xid, go, inserted, commit = threading.Event(), threading.Event(), threading.Event(), threading.Event()
    older, younger = [], []

    def older_writer():
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_current_xact_id()")
            has_xid.set()
            go.wait(10)
            older.append(event(task).pk)

    def younger_writer():
        with transaction.atomic():
            younger.append(event(task).pk)
            inserted.set()
            commit.wait(10)

    first = in_thread(older_writer)
    assert has_xid.wait(10)
    second = in_thread(younger_writer)
    assert inserted.wait(10)
    go.set()
    first.join(10)
    assert claim("dead_letters") == older
    commit.set()
    second.join(10)
    assert younger[0] < older[0]
    assert claim("dead_letters") == younger


@pytest.mark.django_db(transaction=True)
def test_a_claim_does_not_look_below_the_consumers_watermark(task):
    event(task)
    claim("dead_letters")
    assert watermark("dead_letters") > 3  # the first normal transaction id
    planted = event(task)
    TaskEvent.objects.filter(pk=planted.pk).update(xid=3)  # as if written before everything processed

    assert claim("dead_letters") == []


@pytest.mark.django_db(transaction=True)
def test_the_watermark_passes_the_events_a_consumer_has_processed(task):
    ids = [event(task).pk for _ in range(3)]
    assert claim("dead_letters") == ids
    last = max(TaskEvent.objects.filter(pk__in=ids).values_list("xid", flat=True))
    # Another session on the server (other tests, other databases) may still run a transaction
    # older than these events; the watermark passes them once it has ended.
    deadline = time.monotonic() + 20
    while watermark("dead_letters") <= last and time.monotonic() < deadline:
        assert claim("dead_letters") == []
        time.sleep(0.05)
    assert watermark("dead_letters") > last


@pytest.mark.django_db(transaction=True)
def test_a_claimer_that_crashes_after_another_committed_gets_its_events_back(task):
    claim("alerts")  # the watermark row exists, so the second claimer does not wait (lock_timeout) on its insert
    ids = [event(task).pk for _ in range(4)]
    held, crash, first = threading.Event(), threading.Event(), []

    class Crash(Exception):
        pass

    def crashing_consumer():
        with pytest.raises(Crash), transaction.atomic():
            first.extend(e.pk for e in services.claim_task_events(consumer="alerts", kinds=[DEAD], limit=2))
            held.set()
            crash.wait(10)
            raise Crash

    thread = in_thread(crashing_consumer)
    assert held.wait(10)
    assert claim("alerts") == ids[2:]  # commits, and moves the watermark as far as it may
    crash.set()
    thread.join(10)
    assert first == ids[:2]
    assert claim("alerts") == ids[:2]


@pytest.mark.django_db(transaction=True)
def test_a_rolled_back_claim_leaves_the_watermark_where_it_was(task):
    event(task)
    claim("dead_letters")
    before = watermark("dead_letters")
    ids = [event(task).pk]

    class Crash(Exception):
        pass

    with pytest.raises(Crash), transaction.atomic():
        services.claim_task_events(consumer="dead_letters", kinds=[DEAD])
        claim("dead_letters")  # a nested claim advances it inside the doomed transaction
        raise Crash

    assert watermark("dead_letters") == before
    assert claim("dead_letters") == ids


@pytest.mark.django_db(transaction=True)
def test_a_second_consumer_gets_every_event_whatever_the_first_has_processed(task):
    ids = [event(task).pk for _ in range(3)]
    claim("dead_letters")
    claim("dead_letters")
    ids.append(event(task).pk)
    assert claim("dead_letters") == ids[3:]
    assert claim("alerts") == ids


@pytest.mark.django_db(transaction=True)
def test_a_kind_a_consumer_adds_later_comes_with_its_earlier_events(task):
    retry = event(task, TaskEventKind.RETRY_SCHEDULED).pk
    dead = event(task).pk
    assert claim("alerts") == [dead]
    claim("alerts")
    assert claim("alerts", kinds=(DEAD, TaskEventKind.RETRY_SCHEDULED)) == [retry]
