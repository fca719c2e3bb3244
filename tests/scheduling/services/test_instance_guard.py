"""Every way scheduling starts a run of a business instance goes through one guard
(instance_to_run_again): refused with task_live while a run of the instance is live, with
instance_succeeded once one has succeeded, and nothing written; an operator may run a succeeded
instance again as a new one (as_new_instance), never beside a live run of it."""

from datetime import timedelta

import pytest
from django.utils import timezone

from audit.models import AuditEntry
import resources.services
from resources.choices import ResourceState
from resources.models import Resource
from retryops.errors import DomainError
from scheduling import services
from scheduling.choices import TaskState
from scheduling.models import Task
from tests.scheduling.helpers import died_on, failed_there, run_of

pytestmark = pytest.mark.django_db

# Each starts a run of the business instance of `dead`, the last task on `resource`.
PATHS = {
    "strict retry": lambda dead, resource: services.retry_resource(resource=resource, actor="ops:carol"),
    "strict retry naming its flow and payload": lambda dead, resource: services.retry_resource(
        resource=resource, actor="ops:carol", flow=dead.flow, payload=dict(dead.payload)),
    "non-strict retry": lambda dead, resource: services.retry_on_resource_or_another(resource=resource,
                                                                                     actor="ops:carol"),
    "non-strict retry of the task": lambda dead, resource: services.retry_on_resource_or_another(
        resource=resource, actor="ops:carol", instance=dead),
    "task retry by id": lambda dead, resource: services.retry_task(task=dead.pk, actor="ops:carol"),
    "task retries by id": lambda dead, resource: _first_refusal(services.retry_tasks(tasks=[dead.pk],
                                                                                     actor="ops:carol")),
}


def _first_refusal(outcomes):
    if outcomes[0].error is not None:
        raise outcomes[0].error
    return outcomes[0].retry


def written():
    return Task.objects.count(), AuditEntry.objects.count()


# What refuses a run of an instance that has a run in this state.
REFUSALS = {TaskState.RETRYING: "task_live", TaskState.SUCCEEDED: "instance_succeeded"}


@pytest.mark.parametrize("state", REFUSALS)
@pytest.mark.parametrize("path", PATHS)
def test_a_run_of_an_instance_that_is_live_or_succeeded_is_refused_and_nothing_is_written(path, state, alice, bob,
                                                                                        default_policy):
    dead = died_on(alice, default_policy)
    run = run_of(dead, state=state, resource=bob)
    before = written()

    with pytest.raises(DomainError) as refused:
        PATHS[path](dead, alice)

    assert (refused.value.code, refused.value.details["task_id"]) == (REFUSALS[state], run.pk)
    assert written() == before
    assert Resource.objects.get(pk=alice.pk).state == ResourceState.FAILED


def test_a_succeeded_instance_is_refused_with_its_own_code_and_the_sentence_it_always_had(alice, bob,
                                                                                        default_policy):
    dead = died_on(alice, default_policy)
    succeeded = run_of(dead, state=TaskState.SUCCEEDED, resource=bob)
    with pytest.raises(DomainError) as refused:
        services.retry_resource(resource=alice, actor="ops:carol")
    assert (refused.value.code, refused.value.details) == ("instance_succeeded", {"task_id": succeeded.pk})
    assert f"a run of the payload of task {dead.pk}, the last task on account alice@x, succeeded already: its " \
           f"payload again would run it a second time" in str(refused.value)


@pytest.mark.parametrize("state", REFUSALS)
def test_no_probe_starts_a_run_of_an_instance_that_is_live_or_succeeded(state, alice, bob, default_policy):
    dead = died_on(alice, default_policy)
    run_of(dead, state=state, resource=bob)
    resources.services.quarantine(resource=alice.pk, actor="ops", reason="risk control")
    Resource.objects.filter(pk=alice.pk).update(probe_after=timezone.now() - timedelta(seconds=1))
    tasks = Task.objects.count()

    assert services.start_probes() == []

    assert Task.objects.count() == tasks
    row = Resource.objects.get(pk=alice.pk)
    assert (row.state, row.probe_after > timezone.now()) == (ResourceState.QUARANTINED, True)  # postponed


# As a new instance (as_new_instance): the operator's explicit choice to run a succeeded one again.

NEW_INSTANCE_PATHS = {
    "strict retry": lambda dead, resource: services.retry_resource(resource=resource, actor="ops:carol",
                                                                   as_new_instance=True),
    "non-strict retry": lambda dead, resource: services.retry_on_resource_or_another(
        resource=resource, actor="ops:carol", as_new_instance=True),
    "task retry by id": lambda dead, resource: services.retry_task(task=dead.pk, actor="ops:carol",
                                                                   as_new_instance=True),
}


@pytest.mark.parametrize("path", NEW_INSTANCE_PATHS)
def test_a_succeeded_instance_runs_again_as_a_new_instance_when_the_operator_says_so(path, alice, bob,
                                                                                    default_policy):
    dead = died_on(alice, default_policy)
    run_of(dead, state=TaskState.SUCCEEDED, resource=bob)

    task = NEW_INSTANCE_PATHS[path](dead, alice)

    assert (task.flow, task.payload, task.first_run_id) == (dead.flow, dead.payload, None)
    assert task.idempotency_key not in Task.objects.exclude(pk=task.pk).values_list("idempotency_key", flat=True)


@pytest.mark.parametrize("path", NEW_INSTANCE_PATHS)
def test_a_new_instance_is_audited_as_one_naming_the_instance_it_runs_again(path, alice, bob, default_policy):
    dead = died_on(alice, default_policy)
    run_of(dead, state=TaskState.SUCCEEDED, resource=bob)
    before = AuditEntry.objects.count()

    NEW_INSTANCE_PATHS[path](dead, alice)

    [entry] = AuditEntry.objects.order_by("id")[before:]
    assert (entry.after["new_instance"], entry.after["runs_again"]) == (True, dead.pk)
    assert f"as a new business instance: task {dead.pk}'s succeeded already" in entry.reason


@pytest.mark.parametrize("path", NEW_INSTANCE_PATHS)
def test_as_a_new_instance_a_live_run_of_the_instance_is_still_refused(path, alice, bob, default_policy):
    dead = died_on(alice, default_policy)
    live = run_of(dead, state=TaskState.RETRYING, resource=bob)
    before = written()

    with pytest.raises(DomainError) as refused:
        NEW_INSTANCE_PATHS[path](dead, alice)

    assert (refused.value.code, refused.value.details["task_id"]) == ("task_live", live.pk)
    assert written() == before


def test_a_second_new_instance_is_refused_while_the_first_is_live(alice, bob, default_policy):
    # Order 42 died after failing on alice and on bob (the last task on both), then succeeded when
    # an operator ran it again; two operators each run it again as a new instance, from each resource.
    dead = died_on(alice, default_policy)
    failed_there(dead, bob, number=2)
    run_of(dead, state=TaskState.SUCCEEDED, resource=bob)
    first = services.retry_resource(resource=alice, actor="ops:carol", as_new_instance=True)
    before = written()

    with pytest.raises(DomainError) as refused:
        services.retry_resource(resource=bob, actor="ops:dave", as_new_instance=True)

    assert (refused.value.code, refused.value.details["task_id"]) == ("task_live", first.pk)
    assert written() == before


def test_a_dead_instance_asked_to_run_as_a_new_one_runs_as_a_run_of_itself(alice, default_policy):
    # Nothing of it succeeded: its upstream may have half-applied it, so its own idempotency key goes again.
    dead = died_on(alice, default_policy)
    task = services.retry_resource(resource=alice, actor="ops:carol", as_new_instance=True)
    assert task.first_run_id == dead.pk
    assert "new_instance" not in AuditEntry.objects.get(action="resource.retry").after


def test_a_new_instance_sends_its_own_idempotency_key_to_the_upstream(alice, bob, default_policy):
    dead = died_on(alice, default_policy)
    run_of(dead, state=TaskState.SUCCEEDED, resource=bob)
    task = services.retry_resource(resource=alice, actor="ops:carol", as_new_instance=True)

    started = services.begin_attempt(task_id=task.pk, attempt_number=1)

    assert started.context.idempotency_key == task.idempotency_key != dead.idempotency_key




def test_a_run_of_an_earlier_new_instance_is_refused_while_a_newer_one_of_the_same_order_is_live(
        alice, bob, default_policy):
    # Order 42 succeeded on alice; an earlier new instance of it (a business instance of its own)
    # died on bob. Run again as a new instance from alice, then retried from bob, it would run twice.
    order = died_on(alice, default_policy)
    Task.objects.filter(pk=order.pk).update(state=TaskState.SUCCEEDED)
    died_on(bob, default_policy, new_instance_of=order)
    newer = services.retry_resource(resource=alice, actor="ops:carol", as_new_instance=True)
    before = written()

    with pytest.raises(DomainError) as refused:
        services.retry_resource(resource=bob, actor="ops:dave")

    assert (refused.value.code, refused.value.details["task_id"]) == ("task_live", newer.pk)
    assert written() == before
