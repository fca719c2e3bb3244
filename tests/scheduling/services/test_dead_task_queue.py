"""The queue of dead letters is the dead tasks not collected yet: each is claimed once, a claim
rolled back (a consumer that crashed) leaves it for the next one, and two claimers at once never
take the same task and never wait for each other (SKIP LOCKED)."""

import threading

import pytest
from django.db import transaction
from django.utils import timezone

from retryops.errors import DomainError
from scheduling import services
from scheduling.choices import TaskState
from scheduling.models import Task
from tests.factories import TaskFactory
from tests.scheduling.helpers import in_thread


def died(n=1) -> list[int]:
    """`n` tasks that died just now, as finish_attempt leaves them (nobody has collected them)."""
    return [TaskFactory(state=TaskState.DEAD, next_run_at=None, finished_at=timezone.now()).pk for _ in range(n)]


def claim(limit=100) -> list[int]:
    with transaction.atomic():
        return [t.pk for t in services.claim_dead_tasks(limit=limit)]


class Crash(Exception):
    pass


@pytest.mark.django_db
def test_each_dead_task_is_claimed_once_oldest_first():
    ids = died(3)
    assert claim(limit=2) == ids[:2]
    assert claim() == ids[2:]
    assert claim() == []
    assert Task.objects.filter(pk__in=ids, collected_at__isnull=True).count() == 0


@pytest.mark.django_db
def test_only_dead_tasks_are_claimed():
    TaskFactory(state=TaskState.PENDING)
    TaskFactory(state=TaskState.SUCCEEDED, next_run_at=None, finished_at=timezone.now())
    TaskFactory(state=TaskState.CANCELLED, next_run_at=None, finished_at=timezone.now())
    assert claim() == []


@pytest.mark.django_db(transaction=True)
def test_a_claim_outside_a_transaction_is_refused():
    died()
    with pytest.raises(DomainError) as refused:
        services.claim_dead_tasks(limit=10)
    assert refused.value.code == "needs_transaction"


@pytest.mark.django_db
def test_a_rolled_back_consumer_leaves_its_tasks_for_the_next_claim():
    ids = died(2)
    with pytest.raises(Crash), transaction.atomic():
        assert [t.pk for t in services.claim_dead_tasks(limit=10)] == ids
        raise Crash  # the consumer failed before committing its work
    assert claim() == ids


@pytest.mark.django_db(transaction=True)
def test_concurrent_claimers_never_get_the_same_task_and_never_wait():
    ids = died(4)
    held, release, first = threading.Event(), threading.Event(), []

    def slow_consumer():
        with transaction.atomic():
            first.extend(t.pk for t in services.claim_dead_tasks(limit=2))
            held.set()
            release.wait(10)

    thread = in_thread(slow_consumer)
    assert held.wait(10)
    second = claim()  # returns while the first still holds its two: it skips them
    release.set()
    thread.join(10)
    assert first == ids[:2] and second == ids[2:]
    assert claim() == []


@pytest.mark.django_db(transaction=True)
def test_a_claimer_that_crashes_after_another_committed_gets_its_tasks_back():
    ids = died(4)
    held, crash, first = threading.Event(), threading.Event(), []

    def crashing_consumer():
        with pytest.raises(Crash), transaction.atomic():
            first.extend(t.pk for t in services.claim_dead_tasks(limit=2))
            held.set()
            crash.wait(10)
            raise Crash

    thread = in_thread(crashing_consumer)
    assert held.wait(10)
    assert claim() == ids[2:]
    crash.set()
    thread.join(10)
    assert first == ids[:2]
    assert claim() == ids[:2]
