"""The task-event outbox: every consumer gets every event once, whatever order transactions commit in."""

import threading

import pytest
from django.db import connection, transaction

from retryops.errors import DomainError
from scheduling import services
from scheduling.choices import TaskEventKind
from scheduling.models import TaskEvent

DEAD = TaskEventKind.DEAD


@pytest.fixture
def task(redis_conn, pool, instant_policy):
    return services.start_task(flow="demo", pool_name=pool, created_by="shop", policy="instant")


def event(task, kind=DEAD) -> TaskEvent:
    return TaskEvent.objects.create(task=task, kind=kind, details={})


def claim(consumer, kinds=(DEAD,), limit=100) -> list[int]:
    with transaction.atomic():
        return [e.pk for e in services.claim_task_events(consumer=consumer, kinds=list(kinds), limit=limit)]


def in_thread(work):
    """Run `work` on a connection of its own; returns the thread, already started."""
    def run():
        try:
            work()
        finally:
            connection.close()
    thread = threading.Thread(target=run)
    thread.start()
    return thread


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
