"""What a failed attempt leads to, as the feature flags decide, through a real worker."""

import pytest

from resources.choices import ResourceState
from resources.models import Resource
from scheduling import services
from scheduling.choices import TaskEventKind, TaskState
from scheduling.models import TaskEvent
from tests.scheduling.helpers import work

pytestmark = pytest.mark.django_db(transaction=True)


def start_failing_once(alice):
    return services.start_task(flow="demo", pool_name=alice.pool, payload={"script": ["TimeoutError: slow", "ok"]},
                               created_by="test", policy="instant")


def test_with_the_retry_queue_off_a_retryable_failure_goes_straight_to_dead(redis_conn, alice, instant_policy,
                                                                            settings):
    settings.RETRYOPS_FLAGS_OFF = frozenset({"task-retry-queue"})
    task = start_failing_once(alice)
    work()
    task.refresh_from_db()
    assert (task.state, task.attempt_count) == (TaskState.DEAD, 1)
    last = TaskEvent.objects.filter(task=task).order_by("id").last()
    assert last.kind == TaskEventKind.DEAD
    assert last.details["reason"] == "retry queue off (flag task-retry-queue)"
    assert not TaskEvent.objects.filter(task=task, kind=TaskEventKind.RETRY_SCHEDULED).exists()
    assert Resource.objects.get(pk=alice.pk).state == ResourceState.FAILED  # not held for a retry


def test_with_the_retry_queue_on_the_same_failure_is_retried(redis_conn, alice, instant_policy):
    task = start_failing_once(alice)
    work()
    task.refresh_from_db()
    assert (task.state, task.attempt_count) == (TaskState.SUCCEEDED, 2)


def test_with_the_retry_queue_off_a_non_retryable_failure_keeps_its_own_reason(redis_conn, alice, instant_policy,
                                                                               settings):
    settings.RETRYOPS_FLAGS_OFF = frozenset({"task-retry-queue"})
    task = services.start_task(flow="demo", pool_name=alice.pool, created_by="test", policy="instant",
                               payload={"script": ["PermissionError: HTTP 403 account banned"]})
    work()
    dead = TaskEvent.objects.get(task=task, kind=TaskEventKind.DEAD)
    assert dead.details["reason"] == "non_retryable failure (quarantine)"
