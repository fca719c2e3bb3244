"""The shared reads of tasks."""

from datetime import timedelta

import pytest
from django.utils import timezone

import resources.services
from retryops.errors import DomainError
from scheduling import selectors, services
from scheduling.models import Task
from tests.scheduling.helpers import work

pytestmark = pytest.mark.django_db(transaction=True)


def start(pool, **kwargs):
    kwargs.setdefault("policy", "instant")
    return services.start_task(flow="demo", pool_name=pool, created_by="shop", **kwargs)


def test_get_policy_finds_a_policy_by_name(instant_policy):
    assert selectors.get_policy("instant") == instant_policy


def test_get_policy_names_an_unknown_policy():
    with pytest.raises(DomainError) as refused:
        selectors.get_policy("nope")
    assert (refused.value.code, refused.value.details) == ("unknown_policy", {"policy": "nope"})


def test_last_task_on_is_the_last_that_ran_there(redis_conn, pool, alice, instant_policy):
    start(pool, resource=alice)
    work()
    last = start(pool, resource=alice)
    work()
    start(pool, resource=alice)  # not run yet
    assert selectors.last_task_on(alice) == last


def test_last_task_on_is_the_one_whose_attempt_ran_there_last_not_the_newest_task(redis_conn, pool, alice):
    from tests.factories import RetryPolicyFactory

    RetryPolicyFactory(name="moves", max_attempts=2, initial_delay_seconds=120, max_delay_seconds=120,
                       same_resource_on_retry=False)
    older = start(pool, policy="moves", payload={"script": ["TimeoutError: slow"]})
    work()  # its first attempt fails on alice; its retry waits two minutes
    resources.services.reset(resource=alice, actor="ops")
    start(pool, policy="moves")
    work()  # a newer task runs on alice meanwhile
    services.run_task_now(task=older, actor="ops")
    work()  # then the older task's retry runs there, last

    assert selectors.last_task_on(alice) == older


def test_live_task_on_finds_a_waiting_task_pinned_to_the_resource(redis_conn, pool, alice, bob, instant_policy):
    task = start(pool, resource=alice, run_at=timezone.now() + timedelta(hours=1))
    assert (selectors.live_task_on(alice), selectors.live_task_on(bob)) == (task, None)


def test_live_task_on_ignores_finished_tasks(redis_conn, pool, alice, instant_policy):
    start(pool, resource=alice)
    work()
    assert selectors.live_task_on(alice) is None


def test_lost_attempts_are_running_attempts_whose_lease_is_gone(redis_conn, pool, alice, bob, instant_policy):
    lost = start(pool, resource=alice)
    alive = start(pool, resource=bob)
    lost_attempt = services.begin_attempt(task_id=lost.pk, attempt_number=1).attempt
    services.begin_attempt(task_id=alive.pk, attempt_number=1)
    resources.services.release(resource=alice, lease_token=lost_attempt.lease_token, outcome="success")
    assert [a.pk for a in selectors.lost_attempts()] == [lost_attempt.pk]


def test_tasks_of_resource_are_those_that_ran_on_or_asked_for_it(redis_conn, pool, alice, bob, instant_policy):
    ran = start(pool, resource=alice)
    work()
    asked = start(pool, resource=alice, run_at=timezone.now() + timedelta(hours=1))
    start(pool, resource=bob)
    assert list(selectors.tasks_of_resource(alice)) == [asked, ran]
    assert Task.objects.count() == 3


@pytest.mark.parametrize("value", ["abc", True, 1.5, 2**70])
def test_tasks_of_a_resource_id_that_names_no_row_is_bad_input(value):
    with pytest.raises(DomainError) as refused:
        selectors.tasks_of_resource(value)
    assert (refused.value.code, refused.value.details["field"]) == ("bad_input", "resource")


