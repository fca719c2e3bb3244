"""A task's whole life through the run_attempt job on real RQ workers, against the real PostgreSQL
and Redis: success, retries, backoff, death, strictness, lost jobs, outcomes that arrive late."""

from datetime import timedelta

import django_rq
import pytest
from django.db import IntegrityError, transaction
from django.utils import timezone

import resources.services
from resources.choices import EventKind, ResourceState
from resources.errors import PoolExhausted
from resources.models import Resource, ResourceEvent
from retryops.jsonsafe import make_storable
from scheduling import services
from scheduling.choices import AttemptOutcome, TaskEventKind, TaskState
from scheduling.models import Attempt, Task, TaskEvent
from scheduling.runner import run_attempt
from tests.factories import ResourceFactory, RetryPolicyFactory
from tests.scheduling import helpers
from tests.scheduling.helpers import work

pytestmark = pytest.mark.django_db(transaction=True)


def start(pool, script=None, **kwargs):
    payload = {"script": script} if script else {}
    kwargs.setdefault("policy", "instant")
    return services.start_task(flow="demo", pool_name=pool, payload=payload, created_by="test", **kwargs)


def event_kinds(task):
    return list(TaskEvent.objects.filter(task=task).order_by("id").values_list("kind", flat=True))


def timeline(resource):
    return list(ResourceEvent.objects.filter(resource=resource).order_by("id").values_list("kind", flat=True))


def test_a_task_runs_its_flow_and_succeeds(redis_conn, alice, instant_policy):
    task = start(alice.pool)
    work()
    task.refresh_from_db()
    assert task.state == TaskState.SUCCEEDED
    assert task.result == {"resource": "alice@x", "attempt": 1}
    attempt = task.attempts.get()
    assert (attempt.outcome, attempt.resource_id, attempt.number) == (AttemptOutcome.SUCCEEDED, alice.pk, 1)
    assert Resource.objects.get(pk=alice.pk).state == ResourceState.AVAILABLE
    assert Resource.objects.get(pk=alice.pk).success_count == 1


def test_a_retryable_failure_is_retried_on_the_same_resource_and_succeeds(redis_conn, pool, alice, bob, instant_policy):
    task = start(pool, ["TimeoutError: upstream slow", "ok"], resource=alice)
    work()
    task.refresh_from_db()
    assert task.state == TaskState.SUCCEEDED
    assert list(task.attempts.values_list("resource__key", "outcome")) == [
        ("alice@x", "failed"), ("alice@x", "succeeded")]
    assert event_kinds(task) == [TaskEventKind.EXECUTION_FAILED, TaskEventKind.RETRY_SCHEDULED,
                                 TaskEventKind.RETRY_SUCCEEDED]
    assert timeline(alice) == [EventKind.CLAIMED, EventKind.HELD_FOR_RETRY, EventKind.RELEASED_SUCCESS]
    row = Resource.objects.get(pk=alice.pk)
    assert (row.failure_count, row.success_count, row.last_failure_reason) == (1, 1, "TimeoutError: upstream slow")
    assert timeline(bob) == []


def test_a_retry_waits_the_policy_delay_holding_its_resource(redis_conn, alice, default_policy):
    task = start(alice.pool, ["TimeoutError: slow", "ok"], policy="default")
    work()
    task.refresh_from_db()
    failed = task.attempts.get()
    assert task.state == TaskState.RETRYING
    assert task.next_run_at - failed.finished_at == timedelta(seconds=120)
    scheduled = django_rq.get_queue("retries").scheduled_job_registry
    assert scheduled.get_job_ids() == [task.rq_job_id]
    # Its due time to the millisecond, not RQ's whole second (scheduling.queueing._schedule).
    assert abs(scheduled.get_scheduled_time(task.rq_job_id).timestamp() - task.next_run_at.timestamp()) < 0.001
    # Held for the retry: neither claim_next nor anyone else can take it meanwhile.
    row = Resource.objects.get(pk=alice.pk)
    assert (row.state, row.lease_holder) == (ResourceState.IN_USE, f"task {task.pk}")
    assert row.leased_until >= task.next_run_at + timedelta(seconds=alice.pool.lease_seconds)
    with pytest.raises(PoolExhausted):
        resources.services.claim_next(pool=alice.pool, holder="someone else")


def test_a_held_lease_has_one_holding_task_by_its_token(redis_conn, alice, bob, default_policy):
    held = start(alice.pool, ["TimeoutError: slow", "ok"], resource=alice, policy="default")
    other = start(alice.pool, ["TimeoutError: slow", "ok"], resource=bob, policy="default")
    work()
    token = Task.objects.get(pk=held.pk).held_lease_token
    assert token == Resource.objects.get(pk=alice.pk).lease_token
    with pytest.raises(IntegrityError), transaction.atomic():
        Task.objects.filter(pk=other.pk).update(held_lease_token=token)


def test_a_delivery_long_before_next_run_at_defers_without_running_the_flow(redis_conn, alice, default_policy):
    task = start(alice.pool, ["TimeoutError: slow", "ok"], policy="default")
    work()
    task.refresh_from_db()
    assert run_attempt(task_id=task.pk, attempt_number=2) is None  # woken two minutes early
    task.refresh_from_db()
    assert (task.state, task.attempt_count) == (TaskState.RETRYING, 1)
    assert len(django_rq.get_queue("retries").scheduled_job_registry.get_job_ids()) == 2  # the deferral


def test_a_delivery_a_moment_early_waits_and_never_starts_before_next_run_at(redis_conn, alice, default_policy):
    task = start(alice.pool, ["TimeoutError: slow", "ok"], policy="default")
    work()
    due = timezone.now() + timedelta(seconds=0.8)
    Task.objects.filter(pk=task.pk).update(next_run_at=due)
    attempt = run_attempt(task_id=task.pk, attempt_number=2, due=due.timestamp())
    assert attempt.outcome == AttemptOutcome.SUCCEEDED
    assert attempt.started_at >= due


def test_exhausted_retries_make_the_task_dead(redis_conn, alice, instant_policy):
    task = start(alice.pool, ["TimeoutError: slow"])
    work()
    task.refresh_from_db()
    assert task.state == TaskState.DEAD and task.attempt_count == 3
    assert event_kinds(task)[-1] == TaskEventKind.DEAD
    assert TaskEvent.objects.get(task=task, kind=TaskEventKind.DEAD).details["reason"] == "all 3 attempts failed"
    assert Resource.objects.get(pk=alice.pk).state == ResourceState.FAILED
    assert Resource.objects.get(pk=alice.pk).failure_count == 3


def test_a_non_retryable_failure_is_dead_at_once_and_quarantines_the_resource(redis_conn, alice, instant_policy):
    task = start(alice.pool, ["PermissionError: HTTP 403 account banned", "ok"])
    work()
    task.refresh_from_db()
    assert (task.state, task.attempt_count, task.last_error_category) == (TaskState.DEAD, 1, "non_retryable")
    row = Resource.objects.get(pk=alice.pk)
    assert row.state == ResourceState.QUARANTINED
    assert row.quarantine_reason == "PermissionError: HTTP 403 account banned"


def test_a_strict_task_on_an_in_use_resource_fails_clearly_and_touches_no_other(redis_conn, pool, claimed_alice, bob,
                                                                              instant_policy):
    task = start(pool, resource=claimed_alice)
    work()
    attempts = list(Attempt.objects.filter(task=task).order_by("number"))
    assert len(attempts) == 3
    assert all(a.resource_id is None for a in attempts)
    assert attempts[0].error_message.startswith("account alice@x is in use by task 812 until ")
    assert Task.objects.get(pk=task.pk).state == TaskState.DEAD
    assert timeline(bob) == [] and Resource.objects.get(pk=bob.pk).state == ResourceState.AVAILABLE


def test_a_job_delivered_twice_runs_the_flow_once(redis_conn, alice, instant_policy):
    helpers.calls.clear()
    task = services.start_task(flow="counting", pool_name=alice.pool, created_by="test", policy="instant")
    from scheduling.jobs import run_attempt_job

    django_rq.get_queue("flows").enqueue(run_attempt_job, task.pk, 1)  # the duplicate delivery
    work()
    assert helpers.calls == [(task.pk, 1)]
    assert Attempt.objects.filter(task=task).count() == 1


def test_redis_flushed_with_tasks_in_flight_loses_none_and_runs_none_twice(redis_conn, pool, instant_policy):
    ResourceFactory.create_batch(5, pool=pool)
    helpers.calls.clear()
    tasks = [services.start_task(flow="counting", pool_name=pool, created_by="test", policy="instant")
             for _ in range(8)]
    redis_conn.flushdb()  # every queued wake-up is gone
    work()
    assert helpers.calls == []
    assert sorted(services.dispatch_waiting()) == sorted(t.pk for t in tasks)
    work()
    assert sorted(helpers.calls) == sorted((t.pk, 1) for t in tasks)
    assert set(Task.objects.filter(pk__in=[t.pk for t in tasks]).values_list("state", flat=True)) == {"succeeded"}
    assert services.dispatch_waiting() == []


def test_dispatcher_leaves_tasks_whose_jobs_are_still_queued(redis_conn, alice, instant_policy):
    start(alice.pool)
    assert services.dispatch_waiting() == []


def test_starting_a_task_while_redis_is_down_keeps_it_for_the_dispatcher(redis_conn, alice, instant_policy, settings):
    url = settings.RQ_QUEUES["flows"]["URL"]
    settings.RQ_QUEUES["flows"]["URL"] = "redis://127.0.0.1:1/0"  # nothing answers there
    try:
        task = start(alice.pool)
    finally:
        settings.RQ_QUEUES["flows"]["URL"] = url
    task.refresh_from_db()
    assert (task.state, task.rq_job_id) == (TaskState.PENDING, "")
    assert services.dispatch_waiting() == [task.pk]
    work()
    assert Task.objects.get(pk=task.pk).state == TaskState.SUCCEEDED


def test_retry_on_another_resource_releases_the_first_one(redis_conn, pool, alice, bob):
    from tests.factories import RetryPolicyFactory

    RetryPolicyFactory(name="other", initial_delay_seconds=0,
                       retryable_error_patterns=[{"pattern": "captcha", "action": "retry_other_resource"}])
    task = start(pool, ["DemoFlowError: captcha required", "ok"], resource=alice, strict=False, policy="other")
    work()
    task.refresh_from_db()
    assert task.state == TaskState.SUCCEEDED
    assert list(task.attempts.values_list("resource__key", flat=True)) == ["alice@x", "bob@x"]
    assert Resource.objects.get(pk=alice.pk).state == ResourceState.FAILED


def test_a_deadline_stops_retries(redis_conn, alice):
    from tests.factories import RetryPolicyFactory

    RetryPolicyFactory(name="tight", max_attempts=10, initial_delay_seconds=600, max_delay_seconds=600,
                       deadline_seconds=60)
    task = start(alice.pool, ["TimeoutError: slow"], policy="tight")
    work()
    task.refresh_from_db()
    assert task.state == TaskState.DEAD and task.attempt_count == 1
    assert "would pass the deadline" in TaskEvent.objects.get(task=task, kind=TaskEventKind.DEAD).details["reason"]


def test_a_strict_task_stays_on_its_resource_even_when_the_policy_moves_retries(redis_conn, pool, alice, bob):
    from tests.factories import RetryPolicyFactory

    RetryPolicyFactory(name="moves", initial_delay_seconds=0, same_resource_on_retry=False)
    ResourceFactory.create_batch(20, pool=pool)  # many others it could wrongly move to
    task = start(pool, ["TimeoutError: slow", "ok"], resource=alice, policy="moves")
    work()
    task.refresh_from_db()
    assert task.state == TaskState.SUCCEEDED
    assert list(task.attempts.values_list("resource__key", flat=True)) == ["alice@x", "alice@x"]


@pytest.mark.parametrize("resource_attributes", [{"region": "eu", "tier": 2}])
def test_flows_get_the_resource_attributes_as_a_mapping(redis_conn, pool, instant_policy, resource_attributes):
    helpers.seen_attributes.clear()
    ResourceFactory(pool=pool, key="carol@x", attributes=resource_attributes)
    services.start_task(flow="attributes", pool_name=pool, created_by="test", policy="instant")
    work()
    assert helpers.seen_attributes == [resource_attributes]


def test_a_result_json_cannot_hold_keeps_the_success(redis_conn, alice, instant_policy):
    task = services.start_task(flow="odd_result", pool_name=alice.pool, created_by="test", policy="instant")
    work()
    task.refresh_from_db()
    assert task.state == TaskState.SUCCEEDED and task.attempt_count == 1
    assert task.result == {"when": "2026-01-02T03:04:05", "amount": "1.50"}


def test_a_result_no_encoder_can_hold_is_kept_as_its_repr():
    stored, notes = make_storable({"thing": object()})
    assert stored["repr"].startswith("{'thing': <object object at")


def test_a_task_that_dies_before_running_gives_back_its_reserved_resource(redis_conn, alice, instant_policy):
    task = services.retry_resource(resource=alice, actor="test", flow="demo", policy="instant")
    Task.objects.filter(pk=task.pk).update(flow="renamed-away")  # the flow vanished from the settings
    work()
    assert Task.objects.get(pk=task.pk).state == TaskState.DEAD
    row = Resource.objects.get(pk=alice.pk)
    assert (row.state, row.failure_count) == (ResourceState.AVAILABLE, 0)
    assert timeline(alice) == [EventKind.CLAIMED, EventKind.RELEASED_UNUSED]


def test_a_strict_task_on_a_quarantined_resource_dies_at_once(redis_conn, pool, alice, bob, instant_policy):
    resources.services.quarantine(resource=alice, actor="ops", reason="banned")
    task = start(pool, resource=alice)
    work()
    task.refresh_from_db()
    assert (task.state, task.attempt_count) == (TaskState.DEAD, 1)
    assert "account alice@x is quarantined since" in task.last_error and task.last_error.endswith(": banned")
    assert timeline(bob) == []


def test_dispatcher_re_enqueues_a_waiting_task_whose_job_already_finished(redis_conn, alice, instant_policy):
    task = start(alice.pool)
    job = django_rq.get_queue("flows").fetch_job(Task.objects.get(pk=task.pk).rq_job_id)
    job.set_status("finished")  # as if the job ended without running the attempt
    assert services.dispatch_waiting() == [task.pk]


def test_a_success_arriving_after_its_attempt_was_abandoned_is_kept_and_cancels_the_retry(redis_conn, alice,
                                                                                         instant_policy):
    task = start(alice.pool)
    started = services.begin_attempt(task_id=task.pk, attempt_number=1)
    resources.services.sweep_expired_leases(now=timezone.now() + timedelta(hours=1))
    services.recover_lost_attempts()
    late = services.finish_attempt(attempt=started.attempt, result={"late": True})
    assert late.outcome == AttemptOutcome.SUCCEEDED
    task.refresh_from_db()
    assert task.state == TaskState.SUCCEEDED and task.result == {"late": True}
    assert services.begin_attempt(task_id=task.pk, attempt_number=2) is None  # the retry finds nothing to run
    assert TaskEvent.objects.get(task=task, kind=TaskEventKind.LATE_OUTCOME).details == {
        "outcome": "succeeded", "kept": True}


def test_a_success_arriving_after_a_newer_attempt_started_is_dropped_and_recorded(redis_conn, alice, instant_policy):
    task = start(alice.pool)
    started = services.begin_attempt(task_id=task.pk, attempt_number=1)
    resources.services.sweep_expired_leases(now=timezone.now() + timedelta(hours=1))
    services.recover_lost_attempts()
    services.begin_attempt(task_id=task.pk, attempt_number=2)
    late = services.finish_attempt(attempt=started.attempt, result={"late": True})
    assert late.outcome == AttemptOutcome.ABANDONED
    task.refresh_from_db()
    assert task.state == TaskState.RUNNING and task.result is None
    assert TaskEvent.objects.get(task=task, kind=TaskEventKind.LATE_OUTCOME).details == {
        "outcome": "succeeded", "kept": False}


def test_every_attempt_and_rerun_of_a_business_instance_gets_its_idempotency_key_and_a_higher_fencing_token(
        redis_conn, alice, instant_policy):
    RetryPolicyFactory(name="once", max_attempts=1, initial_delay_seconds=0)
    helpers.seen_keys.clear()
    first = services.start_task(flow="keys_then_ok", pool_name=alice.pool, created_by="test", policy="once",
                                resource=alice, strict=True)
    work()
    again = services.retry_resource(resource=alice, actor="ops:carol", policy="instant")
    work()
    assert Task.objects.get(pk=again.pk).state == TaskState.SUCCEEDED
    runs = [(task, attempt) for task, attempt, _, _ in helpers.seen_keys]
    assert runs == [(first.pk, 1), (again.pk, 1), (again.pk, 2)]
    assert {key for _, _, key, _ in helpers.seen_keys} == {first.idempotency_key}
    tokens = [token for *_, token in helpers.seen_keys]
    assert tokens == sorted(set(tokens))
