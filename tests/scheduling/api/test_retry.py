"""POST /api/resources/{id}/retry: the atomic reset-and-retry of one resource, strict by default."""

import pytest
from django.utils import timezone

from audit.models import AuditEntry
import resources.services
from resources.models import Resource
from scheduling.models import Task
from tests.api_helpers import error_of, ok
from tests.factories import AttemptFactory, TaskFactory

pytestmark = pytest.mark.django_db


def retry(api, resource, body=None, **headers):
    return api.post(f"/api/resources/{resource.pk}/retry", body or {}, format="json", **headers)


def fail_on(resource, *, flow="demo", payload=None, error="TimeoutError: read timed out") -> Task:
    """A task that ran on `resource`, failed there and died: what an external system retries."""
    task = TaskFactory(pool=resource.pool, flow=flow, payload=payload or {"order": 41}, state="dead",
                       next_run_at=None, finished_at=timezone.now(), attempt_count=1)
    lease = resources.services.claim_by_id(resource_id=resource.pk, holder=task.holder)
    AttemptFactory(task=task, resource=resource, lease_token=lease.lease_token, outcome="failed",
                   finished_at=timezone.now(), error_class="TimeoutError", error_message="read timed out",
                   error_signature="TimeoutError: read timed out", category="retryable", duration_ms=30)
    resources.services.release(resource=resource.pk, lease_token=lease.lease_token, outcome="failure", error=error,
                               actor=task.holder)
    return task


@pytest.fixture
def failed_alice(alice, default_policy):
    fail_on(alice)
    return Resource.objects.get(pk=alice.pk)


def test_a_strict_retry_resets_the_resource_and_starts_a_task_on_it(api, failed_alice):
    response = retry(api, failed_alice)
    assert response.status_code == 201, response.content
    task = Task.objects.get(pk=response.json()["id"])
    assert response["Location"] == f"/api/tasks/{task.pk}/"
    assert (task.flow, task.payload, task.strict, task.pinned_resource_id) == ("demo", {"order": 41}, True,
                                                                            failed_alice.pk)
    row = Resource.objects.get(pk=failed_alice.pk)
    assert (row.state, row.lease_holder, row.failure_count) == ("in_use", task.holder, 1)
    body = response.json()
    assert (body["state"], body["queued"], body["strict"], body["pool"]) == ("pending", True, True, "accounts")


def test_a_retry_is_one_audit_entry_naming_the_client(api, failed_alice):
    retry(api, failed_alice, HTTP_X_REQUEST_ID="ext-retry-1")
    entry = AuditEntry.objects.get(target_type="resources.resource")
    assert (entry.action, entry.actor, entry.channel, entry.request_id) == (
        "resource.retry", "api:billing", "api", "ext-retry-1")


def test_a_retry_appends_to_the_history_and_clears_nothing(api, failed_alice):
    before = list(failed_alice.events.order_by("id").values_list("kind", flat=True))
    retry(api, failed_alice)
    after = list(failed_alice.events.order_by("id").values_list("kind", flat=True))
    assert after[:len(before)] == before and after[len(before):] == ["reset", "claimed"]
    assert Resource.objects.get(pk=failed_alice.pk).last_failure_reason == "TimeoutError: read timed out"


def test_a_retry_by_pool_and_key_with_its_own_flow_and_payload(api, failed_alice):
    response = api.post("/api/pools/accounts/resources/alice@x/retry/", {"flow": "noop", "payload": {"n": 1}},
                        format="json")
    task = Task.objects.get(pk=response.json()["id"])
    assert (task.flow, task.payload, task.pinned_resource_id) == ("noop", {"n": 1}, failed_alice.pk)


def test_a_strict_retry_of_a_resource_another_system_holds_is_409_naming_holder_and_until(api, failed_alice):
    lease = resources.services.claim_by_id(resource_id=failed_alice.pk, holder="worker-9")
    error = error_of(retry(api, failed_alice), 409)
    assert (error["code"], error["details"]["reason"], error["details"]["holder"]) == (
        "resource_unavailable", "in_use", "worker-9")
    assert error["details"]["until"] == lease.leased_until.isoformat()
    assert "in use by worker-9 until" in error["message"]
    assert Task.objects.count() == 1


def test_a_retry_while_a_task_is_bound_to_the_resource_is_409_task_live(api, failed_alice):
    first = retry(api, failed_alice).json()
    error = error_of(retry(api, failed_alice), 409)
    assert (error["code"], error["details"]["task_id"], error["details"]["holder"]) == (
        "task_live", first["id"], f"task {first['id']}")
    assert error["details"]["until"] is not None
    assert "would run it twice" in error["message"]


def test_a_strict_retry_of_a_quarantined_resource_is_409_saying_so(api, alice, default_policy):
    fail_on(alice, error="AccountBanned: permanently banned")
    error = error_of(retry(api, alice), 409)
    assert (error["code"], error["details"]["reason"]) == ("resource_unavailable", "quarantined")


def test_a_retry_of_a_resource_no_task_ran_on_must_name_the_flow(api, alice, default_policy):
    error = error_of(retry(api, alice), 400)
    assert (error["code"], error["details"]["field"]) == ("bad_input", "flow")
    assert retry(api, alice, {"flow": "noop"}).status_code == 201


@pytest.mark.parametrize("body, code", [({"flow": "nope"}, "unknown_flow"), ({"policy": "nope"}, "unknown_policy"),
                                        ({"payload": [1]}, "bad_input"), ({"strict": "yes"}, "bad_input"),
                                        ({"flow": 3}, "bad_input")])
def test_a_retry_asking_for_what_does_not_exist_is_400(api, failed_alice, body, code):
    assert error_of(retry(api, failed_alice, body), 400)["code"] == code
    assert Resource.objects.get(pk=failed_alice.pk).state == "failed"


def test_a_retry_that_is_not_strict_starts_a_task_asking_for_the_resource_without_resetting_it(api, failed_alice):
    response = retry(api, failed_alice, {"strict": False, "flow": "noop"})
    task = Task.objects.get(pk=response.json()["id"])
    assert (task.strict, task.requested_resource_id, task.state) == (False, failed_alice.pk, "pending")
    assert Resource.objects.get(pk=failed_alice.pk).state == "failed"
    assert AuditEntry.objects.get(action="task.start").actor == "api:billing"


def test_a_retry_that_is_not_strict_runs_the_last_tasks_flow_and_payload_as_a_run_of_its_instance(
        api, failed_alice):
    last = Task.objects.get(flow="demo")
    task = Task.objects.get(pk=retry(api, failed_alice, {"strict": False}).json()["id"])
    assert (task.flow, task.payload, task.strict, task.first_run_id) == ("demo", {"order": 41}, False, last.pk)


def test_a_retry_that_is_not_strict_without_flow_runs_the_last_tasks_flow_and_policy_with_the_payload_sent(
        api, failed_alice):
    last = Task.objects.get(flow="demo")
    response = api.post(f"/api/pools/accounts/resources/{failed_alice.key}/retry",
                        {"strict": False, "payload": {"order": 42}}, format="json")
    task = Task.objects.get(pk=ok(response, 201)["id"])
    assert (task.flow, task.policy_id, task.payload, task.strict, task.first_run_id) == (
        "demo", last.policy_id, {"order": 42}, False, None)


def test_a_retry_that_is_not_strict_of_a_resource_nothing_ran_on_needs_its_flow(api, alice, default_policy):
    assert error_of(retry(api, alice, {"strict": False}), 400)["details"]["field"] == "flow"


@pytest.mark.django_db(transaction=True)
def test_ten_concurrent_retries_that_are_not_strict_of_a_live_instance_start_no_second_run(api, alice,
                                                                                         default_policy, redis_conn):
    import threading

    from rest_framework.test import APIClient

    from scheduling import services

    live = services.start_task(flow="demo", pool_name=alice.pool, resource=alice, created_by="shop",
                               policy="default")
    credentials = api._credentials
    answers, lock = [], threading.Lock()

    def one():
        client = APIClient()
        client.credentials(**credentials)
        try:
            status = retry(client, alice, {"strict": False, "flow": "demo", "payload": live.payload}).status_code
        finally:
            from django.db import connection
            connection.close()
        with lock:
            answers.append(status)

    threads = [threading.Thread(target=one) for _ in range(10)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert answers == [409] * 10
    assert list(Task.objects.values_list("pk", flat=True)) == [live.pk]


def test_an_unknown_resource_is_404(api, default_policy):
    assert error_of(api.post("/api/resources/424242/retry", {}, format="json"), 404)["code"] == "resource_not_found"


def test_a_viewer_may_not_retry(viewer_api, failed_alice):
    assert error_of(retry(viewer_api, failed_alice), 403)["code"] == "permission_denied"
    assert Task.objects.count() == 1


def test_a_retry_sent_again_with_its_idempotency_key_answers_the_same_task(api, failed_alice):
    first = retry(api, failed_alice, HTTP_IDEMPOTENCY_KEY="r-1")
    again = retry(api, failed_alice, HTTP_IDEMPOTENCY_KEY="r-1")
    assert (again.status_code, again.json()["id"], again["Location"]) == (201, first.json()["id"], first["Location"])
    assert again["Idempotent-Replayed"] == "true" and Task.objects.count() == 2


@pytest.mark.django_db(transaction=True)
def test_a_retry_says_its_wake_up_reached_the_queue(api, failed_alice, redis_conn):
    body = retry(api, failed_alice).json()
    assert (body["queued"], body["wake_up_sent"]) == (True, True)


@pytest.mark.django_db(transaction=True)
def test_with_redis_down_a_retry_is_still_accepted_and_queued_in_the_database(api, failed_alice, settings):
    settings.RQ_QUEUES = {name: {**config, "URL": "redis://127.0.0.1:9/0"} for name, config in settings.RQ_QUEUES.items()}
    response = retry(api, failed_alice)
    assert response.status_code == 201, response.content
    body = response.json()
    assert (body["state"], body["queued"], body["wake_up_sent"]) == ("pending", True, False)
    assert Task.objects.get(pk=body["id"]).state == "pending"


def test_a_retry_sending_back_the_payload_as_the_api_showed_it_runs_the_real_secret(api, alice, default_policy):
    fail_on(alice, payload={"order": 41, "api_token": "t-s3cr3t"})
    shown = api.get(f"/api/tasks/{Task.objects.get().pk}/").json()
    assert shown["payload"]["api_token"] == "******"
    response = retry(api, alice, {"flow": shown["flow"], "payload": shown["payload"]})
    assert response.status_code == 201, response.content
    assert Task.objects.get(pk=response.json()["id"]).payload == {"order": 41, "api_token": "t-s3cr3t"}


def test_a_retry_sending_back_a_succeeded_tasks_masked_payload_is_refused_as_running_it_twice(api, alice,
                                                                                              default_policy):
    task = fail_on(alice, payload={"order": 41, "api_token": "t-s3cr3t"})
    Task.objects.filter(pk=task.pk).update(state="succeeded")
    shown = api.get(f"/api/tasks/{task.pk}/").json()
    response = retry(api, alice, {"flow": shown["flow"], "payload": shown["payload"]})
    assert error_of(response, 409)["code"] == "instance_succeeded"
    assert Task.objects.count() == 1


@pytest.mark.parametrize("strict", [True, False])
def test_a_retry_of_a_succeeded_instance_is_409_instance_succeeded_and_starts_nothing(api, alice, strict,
                                                                                    default_policy):
    task = fail_on(alice)
    Task.objects.filter(pk=task.pk).update(state="succeeded")
    error = error_of(retry(api, alice, {"strict": strict}), 409)
    assert (error["code"], error["details"]) == ("instance_succeeded", {"task_id": task.pk})
    assert "succeeded already" in error["message"]
    assert (Task.objects.count(), Resource.objects.get(pk=alice.pk).state) == (1, "failed")


@pytest.mark.parametrize("strict", [True, False])
def test_a_retry_as_a_new_instance_runs_a_succeeded_one_again_with_its_own_idempotency_key(api, alice, strict,
                                                                                          default_policy):
    task = fail_on(alice)
    Task.objects.filter(pk=task.pk).update(state="succeeded")
    response = retry(api, alice, {"strict": strict, "as_new_instance": True})
    assert response.status_code == 201, response.content
    new = Task.objects.get(pk=response.json()["id"])
    assert (new.payload, new.first_run_id, new.idempotency_key != task.idempotency_key) == ({"order": 41}, None, True)
    entry = AuditEntry.objects.get(action="resource.retry" if strict else "task.start")
    assert (entry.after["new_instance"], entry.after["runs_again"], entry.actor) == (True, task.pk, "api:billing")


def test_a_retry_as_a_new_instance_of_a_live_one_is_409_task_live(api, alice, default_policy):
    task = fail_on(alice)
    Task.objects.filter(pk=task.pk).update(state="retrying", next_run_at=timezone.now(), finished_at=None)
    error = error_of(retry(api, alice, {"strict": False, "as_new_instance": True}), 409)
    assert (error["code"], error["details"]["task_id"]) == ("task_live", task.pk)
    assert Task.objects.count() == 1


def test_as_new_instance_sent_as_text_is_400_naming_it(api, alice, default_policy):
    fail_on(alice)
    error = error_of(retry(api, alice, {"as_new_instance": "yes"}), 400)
    assert "as_new_instance" in error["details"]["fields"]
    assert Task.objects.count() == 1


def test_the_schema_documents_as_new_instance_and_the_409_instance_succeeded_of_the_retries(client):
    schema = client.get("/api/schema/?format=json").json()
    retries = {path: operations["post"] for path, operations in schema["paths"].items() if path.endswith("/retry/")}
    assert len(retries) == 3  # a resource's by id and by pool and key, and tasks' by id
    for operation in retries.values():
        body = operation["requestBody"]["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[-1]
        assert "as_new_instance" in schema["components"]["schemas"][body]["properties"]
    for path, operation in retries.items():
        if "/resources/" in path:  # the tasks' answers 200 with each task's status
            assert "instance_succeeded" in operation["responses"]["409"]["description"], path
