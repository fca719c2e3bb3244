"""The operator's "retry this resource" (retry_resource): reset and a strict task in one step, refused while
another task is still alive on the resource."""

from datetime import timedelta

import pytest
from django.utils import timezone

import resources.services
from resources.choices import EventKind, ResourceState
from resources.errors import PoolExhausted, ResourceUnavailable
from resources.models import Resource, ResourceEvent
from resources.selectors import when
from retryops.errors import BadInput, DomainError
from scheduling import services
from scheduling.choices import AttemptOutcome, TaskState
from scheduling.models import Attempt, Task
from tests.factories import RetryPolicyFactory
from tests.scheduling.helpers import work

pytestmark = pytest.mark.django_db(transaction=True)


def later(seconds):
    return timezone.now() + timedelta(seconds=seconds)


def order_42(pool, resource, policy):
    return services.start_task(flow="demo", pool_name=pool, payload={"order": 42, "script": ["TimeoutError: slow", "ok"]},
                               resource=resource, created_by="shop", policy=policy, idempotency_key="order-42")


def test_retry_resource_refuses_while_a_strict_task_waits_to_retry_after_a_swept_hold(redis_conn, pool, alice,
                                                                                     default_policy):
    task = order_42(pool, alice, "default")
    work()
    resources.services.sweep_expired_leases(now=later(10 ** 4))  # the hold ran out; alice is failed, the task waits
    assert Resource.objects.get(pk=alice.pk).state == ResourceState.FAILED

    with pytest.raises(DomainError) as refused:
        services.retry_resource(resource=alice, actor="ops:carol")

    assert refused.value.code == "task_live" and refused.value.details["task_id"] == task.pk
    assert f"task {task.pk}" in str(refused.value) and "runs next at" in str(refused.value)
    assert Task.objects.count() == 1
    assert Resource.objects.get(pk=alice.pk).state == ResourceState.FAILED


def test_retry_resource_refuses_while_a_strict_task_waits_without_holding_it(redis_conn, pool, alice):
    RetryPolicyFactory(name="moves", initial_delay_seconds=120, max_delay_seconds=120, same_resource_on_retry=False)
    task = order_42(pool, alice, "moves")
    work()
    assert Task.objects.get(pk=task.pk).state == TaskState.RETRYING

    with pytest.raises(DomainError) as refused:
        services.retry_resource(resource=alice, actor="ops:carol")

    assert (refused.value.code, refused.value.details["task_id"]) == ("task_live", task.pk)
    assert Task.objects.count() == 1


def test_retry_resource_refuses_while_a_lost_attempt_still_runs_on_it(redis_conn, pool, alice, instant_policy):
    task = services.start_task(flow="demo", pool_name=pool, created_by="shop", policy="instant")
    services.begin_attempt(task_id=task.pk, attempt_number=1)  # its worker dies here
    resources.services.sweep_expired_leases(now=later(10 ** 4))

    with pytest.raises(DomainError) as refused:
        services.retry_resource(resource=alice, actor="ops:carol", flow="demo")

    assert (refused.value.code, refused.value.details["task_id"]) == ("task_live", task.pk)
    assert Task.objects.count() == 1


def test_retry_resource_after_the_task_died_starts_a_new_one(redis_conn, pool, alice, instant_policy):
    task = services.start_task(flow="demo", pool_name=pool, payload={"script": ["TimeoutError: slow"]},
                               resource=alice, created_by="shop", policy="instant")
    work()
    assert Task.objects.get(pk=task.pk).state == TaskState.DEAD
    again = services.retry_resource(resource=alice, actor="ops:carol", payload={})
    assert again.pk != task.pk and again.pinned_resource_id == alice.pk


@pytest.mark.parametrize("actor", [" ", "", "ops\x00carol", None])
def test_retry_resource_refuses_an_actor_that_names_no_one(redis_conn, alice, instant_policy, actor):
    with pytest.raises(DomainError) as refused:
        services.retry_resource(resource=alice, actor=actor, flow="demo")
    assert (refused.value.code, refused.value.details["field"]) == ("bad_input", "actor")
    assert Task.objects.count() == 0


def test_retry_resource_refuses_while_a_task_runs_an_attempt_on_it(redis_conn, pool, alice, instant_policy):
    task = services.start_task(flow="demo", pool_name=pool, created_by="shop", policy="instant")
    services.begin_attempt(task_id=task.pk, attempt_number=1)  # its flow runs now

    with pytest.raises(DomainError) as refused:
        services.retry_resource(resource=alice, actor="ops:carol", flow="demo")

    assert (refused.value.code, refused.value.details["task_id"]) == ("task_live", task.pk)
    assert "is running attempt 1" in str(refused.value)


def test_retry_resource_refuses_while_a_waiting_task_holds_it_for_its_retry(redis_conn, pool, alice, default_policy):
    task = services.start_task(flow="demo", pool_name=pool, payload={"script": ["TimeoutError: slow", "ok"]},
                               created_by="shop", policy="default")
    work()
    task.refresh_from_db()
    assert (task.state, task.pinned_resource_id) == (TaskState.RETRYING, alice.pk)

    with pytest.raises(DomainError) as refused:
        services.retry_resource(resource=alice, actor="ops:carol", flow="demo")

    assert (refused.value.code, refused.value.details["task_id"]) == ("task_live", task.pk)


def test_retry_resource_refused_by_a_task_holding_it_names_the_holder_and_until_when(redis_conn, pool, alice,
                                                                                      default_policy):
    task = services.start_task(flow="demo", pool_name=pool, payload={"script": ["TimeoutError: slow", "ok"]},
                               created_by="shop", policy="default")
    work()
    held = Resource.objects.get(pk=alice.pk)
    task.refresh_from_db()

    with pytest.raises(DomainError) as refused:
        services.retry_resource(resource=alice, actor="ops:carol", flow="demo")

    assert str(refused.value).startswith(
        f"account alice@x is in use by task {task.pk} (demo) until {when(held.leased_until)}: "
        f"it is retrying and runs next at {when(task.next_run_at)}")


def test_retry_resource_refused_by_a_running_attempt_names_the_holder_and_until_when(redis_conn, pool, alice,
                                                                                     instant_policy):
    task = services.start_task(flow="demo", pool_name=pool, created_by="shop", policy="instant")
    services.begin_attempt(task_id=task.pk, attempt_number=1)
    held = Resource.objects.get(pk=alice.pk)

    with pytest.raises(DomainError) as refused:
        services.retry_resource(resource=alice, actor="ops:carol", flow="demo")

    assert str(refused.value) == (
        f"account alice@x is in use by task {task.pk} (demo) until {when(held.leased_until)}: it is running "
        f"attempt 1; a retry now would run it twice: wait for that attempt to end")


def moved_on(pool, alice, *, named):
    """Order 42, not strict, failed on alice and waiting to retry on another resource."""
    RetryPolicyFactory(name="moves", initial_delay_seconds=120, max_delay_seconds=120, same_resource_on_retry=False)
    task = services.start_task(flow="demo", pool_name=pool, payload={"order": 42, "script": ["TimeoutError: slow", "ok"]},
                               resource=alice if named else None, strict=False, created_by="shop", policy="moves")
    work()
    task.refresh_from_db()
    assert (task.state, task.resource_id, task.pinned_resource_id) == (TaskState.RETRYING, alice.pk, None)
    return task


@pytest.mark.parametrize("named", [False, True], ids=["unnamed", "named_not_strict"])
def test_retry_resource_with_a_flow_goes_ahead_when_the_waiting_task_moved_on_to_another_resource(
        redis_conn, pool, alice, named):
    task = moved_on(pool, alice, named=named)

    again = services.retry_resource(resource=alice, actor="ops:carol", flow="demo", policy="moves")

    assert again.pk != task.pk and again.pinned_resource_id == alice.pk and again.payload == {}


@pytest.mark.parametrize("named", [False, True], ids=["unnamed", "named_not_strict"])
def test_retry_resource_refuses_to_copy_the_payload_of_a_task_that_moved_on_and_still_waits(redis_conn, pool, alice,
                                                                                          named):
    task = moved_on(pool, alice, named=named)

    with pytest.raises(DomainError) as refused:
        services.retry_resource(resource=alice, actor="ops:carol")

    assert (refused.value.code, refused.value.details["task_id"]) == ("task_live", task.pk)
    assert "has moved on to another resource" in str(refused.value)
    assert Task.objects.count() == 1


def test_retry_resource_repeats_the_task_that_failed_there_last_not_a_newer_one_that_succeeded(redis_conn, pool,
                                                                                               alice):
    RetryPolicyFactory(name="moves", max_attempts=2, initial_delay_seconds=120, max_delay_seconds=120,
                       same_resource_on_retry=False)
    older = services.start_task(flow="demo", pool_name=pool, payload={"order": 42, "script": ["TimeoutError: slow"]},
                                created_by="shop", policy="moves")
    work()  # order 42 fails on alice and waits two minutes to retry
    resources.services.reset(resource=alice, actor="ops")
    services.start_task(flow="demo", pool_name=pool, payload={"order": 43}, created_by="shop", policy="moves")
    work()  # order 43 succeeds on alice meanwhile
    services.run_task_now(task=older, actor="ops")
    work()  # order 42's last attempt fails there: it is dead, alice failed
    assert Task.objects.get(pk=older.pk).state == TaskState.DEAD

    again = services.retry_resource(resource=alice, actor="ops:carol")

    assert again.payload["order"] == 42  # not order 43 a second time


def test_retry_resource_refuses_to_copy_a_task_that_succeeded_on_another_resource_after_failing_there(redis_conn, pool,
                                                                                                     alice, bob):
    RetryPolicyFactory(name="elsewhere", initial_delay_seconds=0, retryable_error_patterns=[
        {"pattern": "captcha", "action": "retry_other_resource"}])
    task = services.start_task(flow="demo", pool_name=pool, payload={"order": 42, "script": ["DemoFlowError: captcha", "ok"]},
                               created_by="shop", policy="elsewhere")
    work()
    first, second = Attempt.objects.filter(task=task).order_by("number")
    assert (first.outcome, second.outcome, Task.objects.get(pk=task.pk).state) == (
        AttemptOutcome.FAILED, AttemptOutcome.SUCCEEDED, TaskState.SUCCEEDED)

    with pytest.raises(DomainError) as refused:
        services.retry_resource(resource=first.resource, actor="ops:carol")

    assert (refused.value.code, refused.value.details) == ("instance_succeeded", {"task_id": task.pk})
    assert "succeeded already" in str(refused.value)
    assert Task.objects.count() == 1


def died_on_alice_and_bob(pool, alice, bob):
    """Order 42: failed on one resource (captcha: try another), then on the other, and died; it is
    the last task on both."""
    RetryPolicyFactory(name="elsewhere", max_attempts=2, initial_delay_seconds=0, retryable_error_patterns=[
        {"pattern": "captcha", "action": "retry_other_resource"}])
    task = services.start_task(flow="demo", pool_name=pool, created_by="shop", policy="elsewhere",
                               payload={"order": 42, "script": ["DemoFlowError: captcha", "TimeoutError: slow", "ok"]})
    work()
    assert Task.objects.get(pk=task.pk).state == TaskState.DEAD
    assert {a.resource_id for a in Attempt.objects.filter(task=task)} == {alice.pk, bob.pk}
    return task


def test_retry_resource_refuses_a_second_copy_of_a_dead_task_while_the_first_copy_waits(redis_conn, pool, alice, bob):
    died_on_alice_and_bob(pool, alice, bob)
    first = services.retry_resource(resource=alice, actor="ops:carol")

    with pytest.raises(DomainError) as refused:
        services.retry_resource(resource=bob, actor="ops:dave")

    assert (refused.value.code, refused.value.details["task_id"]) == ("task_live", first.pk)
    assert Task.objects.count() == 2


def test_retry_resource_refuses_a_second_copy_of_a_dead_task_whose_first_copy_succeeded(redis_conn, pool, alice, bob,
                                                                                        instant_policy):
    died_on_alice_and_bob(pool, alice, bob)
    first = services.retry_resource(resource=alice, actor="ops:carol", policy="instant")  # three attempts this time
    work()
    assert Task.objects.get(pk=first.pk).state == TaskState.SUCCEEDED

    with pytest.raises(DomainError) as refused:
        services.retry_resource(resource=bob, actor="ops:dave")

    assert (refused.value.code, refused.value.details) == ("instance_succeeded", {"task_id": first.pk})
    assert Task.objects.count() == 2


def test_retry_resource_given_the_last_tasks_flow_and_payload_is_refused_like_a_copy(redis_conn, pool, alice, bob):
    dead = died_on_alice_and_bob(pool, alice, bob)
    first = services.retry_resource(resource=alice, actor="ops:carol")

    with pytest.raises(DomainError) as refused:  # as the console's retry form sends it, prefilled
        services.retry_resource(resource=bob, actor="ops:dave", flow=dead.flow, payload=dict(dead.payload))

    assert (refused.value.code, refused.value.details["task_id"]) == ("task_live", first.pk)


@pytest.mark.parametrize("value", ["abc", True, 1.5, 2**70])
def test_retry_resource_refuses_an_id_that_names_no_resource(redis_conn, alice, instant_policy, value):
    with pytest.raises(DomainError) as refused:
        services.retry_resource(resource=value, actor="ops:carol", flow="demo")
    assert (refused.value.code, refused.value.details["field"]) == ("bad_input", "resource")


def test_retry_resource_of_a_missing_resource_names_it(redis_conn, alice, instant_policy):
    with pytest.raises(DomainError) as refused:
        services.retry_resource(resource=alice.pk + 1000, actor="ops:carol", flow="demo")
    assert refused.value.code == "resource_not_found" and f"no resource with id {alice.pk + 1000}" in str(refused.value)


def test_retry_resource_refuses_an_actor_with_a_lone_surrogate(redis_conn, alice, instant_policy):
    with pytest.raises(DomainError) as refused:
        services.retry_resource(resource=alice, actor="ops\ud800carol", flow="demo")
    assert (refused.value.code, refused.value.details["field"]) == ("bad_input", "actor")
    assert Task.objects.count() == 0


@pytest.fixture
def failed_alice(redis_conn, alice, instant_policy):
    task = services.start_task(flow="demo", pool_name=alice.pool, payload={"script": ["ConnectionResetError: reset"]},
                               created_by="test", policy="instant")
    work()
    assert Task.objects.get(pk=task.pk).state == TaskState.DEAD
    return Resource.objects.get(pk=alice.pk)


def test_retry_resource_resets_and_reserves_it_for_a_strict_task(failed_alice):
    task = services.retry_resource(resource=failed_alice, actor="ops:carol", payload={})
    row = Resource.objects.get(pk=failed_alice.pk)
    assert (row.state, row.lease_holder) == (ResourceState.IN_USE, f"task {task.pk}")
    assert (task.strict, task.pinned_resource_id, task.flow) == (True, failed_alice.pk, "demo")
    # between the reset and the job, nobody else can take it
    with pytest.raises(PoolExhausted):
        resources.services.claim_next(pool=failed_alice.pool, holder="another scheduler")
    work()
    assert Task.objects.get(pk=task.pk).state == TaskState.SUCCEEDED


def test_retry_resource_appends_to_the_history_instead_of_clearing_it(failed_alice):
    services.retry_resource(resource=failed_alice, actor="ops:carol", payload={})
    work()
    row = Resource.objects.get(pk=failed_alice.pk)
    assert row.failure_count == 3 and row.last_failure_reason == "ConnectionResetError: reset"
    kinds = list(ResourceEvent.objects.filter(resource=row).order_by("id").values_list("kind", flat=True))
    assert kinds[-3:] == [EventKind.RESET, EventKind.CLAIMED, EventKind.RELEASED_SUCCESS]
    assert ResourceEvent.objects.get(resource=row, kind=EventKind.RESET).actor == "ops:carol"


def test_retry_resource_reuses_the_last_flow_and_payload(failed_alice):
    task = services.retry_resource(resource=failed_alice, actor="ops")
    assert (task.flow, task.policy.name, task.payload) == ("demo", "instant", {"script": ["ConnectionResetError: reset"]})


def test_retry_resource_of_an_in_use_resource_fails_and_writes_nothing(redis_conn, claimed_alice, bob, instant_policy):
    before = Task.objects.count()
    with pytest.raises(ResourceUnavailable, match="account alice@x is in use by task 812"):
        services.retry_resource(resource=claimed_alice, actor="ops", flow="demo")
    assert Task.objects.count() == before
    assert Resource.objects.get(pk=bob.pk).state == ResourceState.AVAILABLE


def test_retry_resource_of_a_resource_an_external_worker_holds_names_the_holder_before_the_payload_question(
        redis_conn, pool, alice, instant_policy):
    services.start_task(flow="demo", pool_name=pool, payload={"order": 42}, resource=alice, created_by="shop",
                        policy="instant")
    work()  # order 42 succeeds on alice: her last task, whose payload again would be refused
    held = resources.services.claim_by_id(resource_id=alice.pk, holder="billing-worker-7")

    with pytest.raises(ResourceUnavailable) as refused:
        services.retry_resource(resource=alice, actor="ops:carol")

    assert str(refused.value) == f"account alice@x is in use by billing-worker-7 until {when(held.leased_until)}"
    assert Task.objects.count() == 1


def test_retry_resource_without_history_needs_a_flow(redis_conn, alice, instant_policy):
    with pytest.raises(BadInput, match="no task has run on account alice@x yet: name the flow"):
        services.retry_resource(resource=alice, actor="ops")


def test_retry_resource_command_reports_the_task(failed_alice):
    from io import StringIO

    from django.core.management import call_command

    out = StringIO()
    call_command("retry_resource", pool="accounts", key="alice@x", actor="ops", stdout=out)
    assert "started task" in out.getvalue() and "on alice@x" in out.getvalue()
