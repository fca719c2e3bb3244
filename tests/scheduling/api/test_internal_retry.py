"""POST /api/internal/tasks/retry: tasks retried by id, each a strict retry of its resource that
runs its business instance again, each with its own outcome in the order asked."""

import pytest
from django.utils import timezone

from audit.models import AuditEntry
import resources.services
from resources.choices import ResourceState
from scheduling.choices import TaskState
from scheduling.models import Task
from tests.factories import TaskFactory
from tests.scheduling.helpers import died_on

pytestmark = pytest.mark.django_db

RETRY = "/api/internal/tasks/retry"


def retry(api, body, **headers):
    return api.post(RETRY, body, format="json", **headers)


def results(response) -> list[dict]:
    assert response.status_code == 200, response.content
    return response.json()["results"]


def test_a_dead_task_is_retried_strictly_on_its_resource_as_its_business_instance(api, alice, default_policy):
    dead = died_on(alice, default_policy)
    [result] = results(retry(api, {"task": dead.pk}))
    new = Task.objects.exclude(pk=dead.pk).get()
    assert (result["task"], result["status"], result["error"], result["retry"]["id"]) == (dead.pk, 201, None, new.pk)
    assert (new.flow, new.payload, new.strict, new.requested_resource_id, new.first_run_id) == (
        "demo", {"order": 42}, True, alice.pk, dead.pk)
    alice.refresh_from_db()
    assert (alice.state, alice.lease_holder) == (ResourceState.IN_USE, new.holder)
    entry = AuditEntry.objects.get(action="resource.retry")
    assert (entry.actor, entry.channel) == ("api:billing", "api")


def test_a_batch_answers_each_task_in_order_and_one_refusal_stops_no_other(api, pool, alice, bob, default_policy):
    on_alice, on_bob = died_on(alice, default_policy), died_on(bob, default_policy, payload={"order": 7})
    resources.services.quarantine(resource=bob.pk, actor="ops", reason="banned upstream")
    response = retry(api, {"tasks": [on_bob.pk, 999999, on_alice.pk]})
    assert response.json()["retried"] == 1 and response.json()["refused"] == 2
    quarantined, unknown, retried = results(response)
    assert (quarantined["status"], quarantined["error"]["code"], quarantined["error"]["details"]["reason"]) == (
        409, "resource_unavailable", "quarantined")
    assert (unknown["task"], unknown["status"], unknown["error"]["code"]) == (999999, 404, "task_not_found")
    assert (retried["status"], retried["retry"]["requested_resource"]) == (201, alice.pk)


def test_a_task_live_on_its_resource_is_409_task_live(api, alice, default_policy):
    waiting = died_on(alice, default_policy, state=TaskState.RETRYING, finished_at=None, next_run_at=timezone.now(),
                      pinned_resource=alice)
    [result] = results(retry(api, {"task": waiting.pk}))
    assert (result["status"], result["error"]["code"], result["error"]["details"]["task_id"]) == (
        409, "task_live", waiting.pk)
    assert Task.objects.count() == 1


def test_a_task_whose_instance_succeeded_since_is_refused_though_another_task_ran_there_last(
        api, alice, default_policy):
    dead = died_on(alice, default_policy)
    TaskFactory(pool=alice.pool, policy=default_policy, payload=dead.payload, first_run=dead, state=TaskState.SUCCEEDED,
                next_run_at=None, finished_at=timezone.now())
    died_on(alice, default_policy, payload={"order": 43})  # another order ran on alice afterwards
    [result] = results(retry(api, {"task": dead.pk}))
    assert (result["status"], result["error"]["code"]) == (409, "instance_succeeded")
    assert "succeeded already" in result["error"]["message"]
    assert Task.objects.count() == 3


def test_a_task_whose_instance_succeeded_runs_again_as_a_new_instance_when_asked(api, alice, default_policy):
    dead = died_on(alice, default_policy)
    TaskFactory(pool=alice.pool, policy=default_policy, payload=dead.payload, first_run=dead, state=TaskState.SUCCEEDED,
                next_run_at=None, finished_at=timezone.now())
    [result] = results(retry(api, {"task": dead.pk, "as_new_instance": True}))
    assert (result["status"], result["error"]) == (201, None)
    new = Task.objects.get(pk=result["retry"]["id"])
    assert (new.payload, new.first_run_id, new.requested_resource_id) == (dead.payload, None, alice.pk)
    assert AuditEntry.objects.get(action="resource.retry").after["runs_again"] == dead.pk


def test_a_task_that_never_had_a_resource_is_bad_input_naming_it(api, pool, default_policy):
    task = TaskFactory(pool=pool, policy=default_policy, state=TaskState.DEAD, next_run_at=None,
                       finished_at=timezone.now())
    [result] = results(retry(api, {"task": task.pk}))
    assert (result["status"], result["error"]["details"]["field"]) == (400, "task")


@pytest.mark.parametrize("body, field", [
    ({}, "task"), ({"task": 1, "tasks": [2]}, "task"), ({"task": "x"}, "task"), ({"task": 0}, "task"),
    ({"tasks": []}, "tasks"), ({"tasks": 5}, "tasks"), ({"tasks": [1, 1]}, "tasks"),
    ({"tasks": list(range(1, 102))}, "tasks"),
])
def test_a_bad_retry_body_is_400_naming_the_field(api, db, body, field):
    response = retry(api, body)
    assert response.status_code == 400, response.content
    assert field in response.json()["error"]["details"]["fields"]


def test_a_retry_repeated_with_its_idempotency_key_answers_the_first_outcome_and_retries_nothing_more(
        api, alice, default_policy):
    dead = died_on(alice, default_policy)
    first = retry(api, {"task": dead.pk}, HTTP_IDEMPOTENCY_KEY="retry-1")
    again = retry(api, {"task": dead.pk}, HTTP_IDEMPOTENCY_KEY="retry-1")
    assert (again.json(), again["Idempotent-Replayed"]) == (first.json(), "true")
    assert Task.objects.count() == 2
