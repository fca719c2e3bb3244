"""The task endpoints: start, list with its filters, read with its attempts, cancel and run now,
each with its refusals in the API's error shape."""

from datetime import timedelta

import pytest
from django.utils import timezone

from audit.models import AuditEntry
import resources.services
from scheduling.choices import TaskEventKind, TaskState
from scheduling.models import Task
from tests.api_helpers import error_of, ok, post
from tests.factories import (
    AttemptFactory,
    ResourceFactory,
    TaskEventFactory,
    TaskFactory,
)

pytestmark = pytest.mark.django_db


def iso(moment) -> str:
    return moment.isoformat().replace("+", "%2B")


@pytest.fixture
def waiting(pool, default_policy):
    return TaskFactory(pool=pool, policy=default_policy, state=TaskState.SCHEDULED,
                       next_run_at=timezone.now() + timedelta(hours=1))


# Start


def test_a_task_is_started_with_its_location_queued_and_audited_naming_the_client(api, pool, default_policy):
    response = post(api, "/api/tasks/", {"flow": "demo", "pool": "accounts", "payload": {"order": 42}})
    body = ok(response, 201)
    task = Task.objects.get()
    assert (body["id"], body["state"], body["queued"], body["payload"], body["created_by"]) == (
        task.pk, "pending", True, {"order": 42}, "api:billing")
    assert response["Location"] == f"/api/tasks/{task.pk}/"
    entry = AuditEntry.objects.get(action="task.start")
    assert (entry.actor, entry.channel, entry.request_id) == ("api:billing", "api", response["X-Request-ID"])


def test_a_task_started_with_the_flow_and_payload_of_one_that_succeeded_is_a_new_business_instance(
        api, alice, default_policy):
    # A start names what to do, not a task to run again (the same sync every day, a batch's
    # ticks): the retries are how an instance runs again; Idempotency-Key makes a resend safe.
    done = TaskFactory(pool=alice.pool, policy=default_policy, payload={"sync": "daily"}, state=TaskState.SUCCEEDED,
                       next_run_at=None, finished_at=timezone.now())
    body = ok(post(api, "/api/tasks/", {"flow": "demo", "pool": "accounts", "payload": {"sync": "daily"},
                                        "resource": alice.pk}), 201)
    task = Task.objects.get(pk=body["id"])
    assert (task.first_run_id, task.idempotency_key != done.idempotency_key) == (None, True)


def test_a_task_on_a_named_resource_is_strict_by_default(api, alice, default_policy):
    body = ok(post(api, "/api/tasks/", {"flow": "demo", "pool": "accounts", "resource": alice.pk}), 201)
    assert (body["strict"], body["requested_resource"]) == (True, alice.pk)


def test_a_task_may_ask_for_a_resource_without_being_strict(api, alice, default_policy):
    body = ok(post(api, "/api/tasks/", {"flow": "demo", "pool": "accounts", "resource": alice.pk, "strict": False}),
              201)
    assert (body["strict"], body["requested_resource"]) == (False, alice.pk)


def test_a_task_due_later_is_scheduled(api, pool, default_policy):
    run_at = timezone.now() + timedelta(hours=2)
    body = ok(post(api, "/api/tasks/", {"flow": "demo", "pool": "accounts", "run_at": run_at.isoformat()}), 201)
    assert body["state"] == "scheduled" and body["next_run_at"] == run_at.isoformat().replace("+00:00", "Z")


def test_a_task_create_repeated_with_its_idempotency_key_answers_the_first_task_and_starts_no_other(
        api, pool, default_policy):
    body = {"flow": "demo", "pool": "accounts", "payload": {"order": 42}}
    first = post(api, "/api/tasks/", body, HTTP_IDEMPOTENCY_KEY="order-42")
    again = post(api, "/api/tasks/", body, HTTP_IDEMPOTENCY_KEY="order-42")
    assert (again.status_code, again.json(), again["Location"]) == (201, first.json(), first["Location"])
    assert again["Idempotent-Replayed"] == "true"
    assert Task.objects.count() == 1 and AuditEntry.objects.filter(action="task.start").count() == 1


def test_the_same_idempotency_key_with_another_task_is_422(api, pool, default_policy):
    post(api, "/api/tasks/", {"flow": "demo", "pool": "accounts"}, HTTP_IDEMPOTENCY_KEY="k")
    error = error_of(post(api, "/api/tasks/", {"flow": "noop", "pool": "accounts"}, HTTP_IDEMPOTENCY_KEY="k"), 422)
    assert error["code"] == "idempotency_key_reused" and Task.objects.count() == 1


@pytest.mark.parametrize("body, field", [
    ({"pool": "accounts"}, "flow"),
    ({"flow": "demo"}, "pool"),
    ({"flow": 12, "pool": "accounts"}, "flow"),
    ({"flow": "demo", "pool": "accounts", "payload": [1]}, "payload"),
    ({"flow": "demo", "pool": "accounts", "payload": {"a": "x\u0000y"}}, "payload"),
    ({"flow": "demo", "pool": "accounts", "strict": "no"}, "strict"),
    ({"flow": "demo", "pool": "accounts", "resource": 2 ** 63}, "resource"),
    ({"flow": "demo", "pool": "accounts", "run_at": "2030-01-01T00:00:00"}, "run_at"),
    ({"flow": "demo", "pool": "accounts", "run_at": "soon"}, "run_at"),
])
def test_a_bad_task_body_is_400_naming_the_field(api, pool, default_policy, body, field):
    error = error_of(post(api, "/api/tasks/", body), 400)
    assert error["code"] == "bad_input" and field in error["details"]["fields"]
    assert not Task.objects.exists()


@pytest.mark.parametrize("body, status, code", [
    ({"flow": "nope", "pool": "accounts"}, 400, "unknown_flow"),
    ({"flow": "demo", "pool": "accounts", "policy": "nope"}, 400, "unknown_policy"),
    ({"flow": "demo", "pool": "nope"}, 404, "pool_not_found"),
    ({"flow": "demo", "pool": "accounts", "resource": 999999}, 404, "resource_not_found"),
])
def test_what_the_service_refuses_is_answered_with_its_code(api, pool, default_policy, body, status, code):
    assert error_of(post(api, "/api/tasks/", body), status)["code"] == code


def test_a_resource_of_another_pool_is_bad_input_naming_it(api, pool, default_policy):
    other = ResourceFactory(pool__name="numbers")
    error = error_of(post(api, "/api/tasks/", {"flow": "demo", "pool": "accounts", "resource": other.pk}), 400)
    assert error["details"]["field"] == "resource"


def test_a_run_at_more_than_a_year_ahead_is_bad_input(api, pool, default_policy):
    run_at = (timezone.now() + timedelta(days=400)).isoformat()
    assert error_of(post(api, "/api/tasks/", {"flow": "demo", "pool": "accounts", "run_at": run_at}),
                    400)["details"]["field"] == "run_at"


# List and read


def test_tasks_are_listed_newest_first_and_filtered(api, pool, alice, default_policy):
    other_pool = ResourceFactory(pool__name="numbers").pool
    on_alice = TaskFactory(pool=pool, policy=default_policy, requested_resource=alice)
    dead = TaskFactory(pool=pool, policy=default_policy, flow="noop", state="dead", next_run_at=None,
                       finished_at=timezone.now())
    elsewhere = TaskFactory(pool=other_pool, policy=default_policy)

    def ids(query=""):
        return [t["id"] for t in ok(api.get(f"/api/tasks/?{query}"))["results"]]

    assert ids() == [elsewhere.pk, dead.pk, on_alice.pk]
    assert ids("state=dead") == [dead.pk]
    assert ids("flow=noop") == [dead.pk]
    assert ids("pool=numbers") == [elsewhere.pk]
    assert ids(f"resource={alice.pk}") == [on_alice.pk]


def test_tasks_are_filtered_by_creation_and_by_their_last_change(api, pool, default_policy):
    old = TaskFactory(pool=pool, policy=default_policy)
    Task.objects.filter(pk=old.pk).update(created_at=timezone.now() - timedelta(days=2))
    touched = TaskFactory(pool=pool, policy=default_policy)
    Task.objects.filter(pk=touched.pk).update(created_at=timezone.now() - timedelta(days=2))
    TaskEventFactory(task=touched, kind=TaskEventKind.RUN_NOW)
    new = TaskFactory(pool=pool, policy=default_policy)
    since = iso(timezone.now() - timedelta(days=1))

    def ids(query):
        return [t["id"] for t in ok(api.get(f"/api/tasks/?{query}"))["results"]]

    assert ids(f"created_since={since}") == [new.pk]
    assert ids(f"updated_since={since}") == [new.pk, touched.pk]


def test_an_attempt_that_ran_lately_counts_as_a_change(api, pool, default_policy):
    task = TaskFactory(pool=pool, policy=default_policy, state="running", next_run_at=None)
    Task.objects.filter(pk=task.pk).update(created_at=timezone.now() - timedelta(days=2))
    AttemptFactory(task=task)
    since = iso(timezone.now() - timedelta(days=1))
    assert [t["id"] for t in ok(api.get(f"/api/tasks/?updated_since={since}"))["results"]] == [task.pk]


@pytest.mark.parametrize("query", ["state=gone", "resource=abc", "resource=0", "resource=99999999999999999999",
                                   "created_since=yesterday", "updated_since=2026-13-01T00:00:00Z", "flow=a%00b",
                                   "page_size=0"])
def test_a_bad_task_filter_is_400_naming_it(api, db, query):
    assert list(error_of(api.get(f"/api/tasks/?{query}"), 400)["details"]["fields"]) == [query.split("=")[0]]


def test_a_task_is_read_with_its_attempts_in_order(api, pool, alice, default_policy):
    task = TaskFactory(pool=pool, policy=default_policy, state="retrying", attempt_count=2)
    AttemptFactory(task=task, number=2, resource=alice, outcome="failed", finished_at=timezone.now(),
                   error_class="TimeoutError", error_message="slow")
    AttemptFactory(task=task, number=1, resource=alice, outcome="failed", finished_at=timezone.now())
    body = ok(api.get(f"/api/tasks/{task.pk}/"))
    assert [(a["number"], a["resource_key"], a["outcome"]) for a in body["attempts"]] == [
        (1, "alice@x", "failed"), (2, "alice@x", "failed")]
    assert (body["pool"], body["policy"], body["attempts"][1]["error_class"]) == ("accounts", "default",
                                                                                   "TimeoutError")


@pytest.mark.parametrize("path", ["/api/tasks/999999/", "/api/tasks/999999/cancel", "/api/tasks/999999/run_now",
                                  "/api/tasks/1234567890123456789/"])
def test_an_unknown_task_is_404(api, db, path):
    response = api.get(path) if path.endswith("/") else post(api, path)
    assert response.status_code == 404
    assert response.json()["error"]["code"] in ("task_not_found", "not_found")


# Cancel and run now


def test_a_waiting_task_is_cancelled_with_its_reason_and_audited(api, waiting):
    body = ok(post(api, f"/api/tasks/{waiting.pk}/cancel", {"reason": "customer withdrew"}))
    assert (body["state"], body["queued"]) == ("cancelled", False)
    entry = AuditEntry.objects.get(action="task.cancel")
    assert (entry.actor, entry.reason) == ("api:billing", "customer withdrew")


def test_a_cancelled_task_gives_back_the_resource_it_held(api, pool, alice, default_policy):
    task = TaskFactory(pool=pool, policy=default_policy)
    lease = resources.services.claim_by_id(resource_id=alice.pk, holder=task.holder, reserve=True)
    Task.objects.filter(pk=task.pk).update(resource=alice, pinned_resource=alice, held_lease_token=lease.lease_token)
    ok(post(api, f"/api/tasks/{task.pk}/cancel"))
    alice.refresh_from_db()
    assert alice.state == "available"


def test_a_waiting_task_runs_now(api, waiting):
    body = ok(post(api, f"/api/tasks/{waiting.pk}/run_now"))
    assert body["state"] == "pending"
    assert AuditEntry.objects.get(action="task.run_now").actor == "api:billing"


@pytest.mark.parametrize("action", ["cancel", "run_now"])
@pytest.mark.parametrize("state", ["running", "succeeded", "dead", "cancelled"])
def test_cancel_or_run_now_of_a_task_that_is_not_waiting_is_409_illegal_transition(api, pool, default_policy,
                                                                                    action, state):
    finished = {} if state == "running" else {"finished_at": timezone.now()}
    task = TaskFactory(pool=pool, policy=default_policy, state=state, next_run_at=None, **finished)
    error = error_of(post(api, f"/api/tasks/{task.pk}/{action}"), 409)
    assert (error["code"], error["details"]["state"]) == ("illegal_transition", state)


def test_a_cancel_reason_that_is_not_text_is_400(api, waiting):
    assert error_of(post(api, f"/api/tasks/{waiting.pk}/cancel", {"reason": 5}), 400)["details"]["fields"] == {
        "reason": ["must be a string, got int."]}


# Auth


@pytest.mark.parametrize("path", ["/api/tasks/", "/api/tasks/{id}/cancel", "/api/tasks/{id}/run_now",
                                  "/api/internal/tasks/retry"])
def test_a_viewer_reads_tasks_but_is_refused_every_action_with_403(viewer_api, waiting, path):
    assert viewer_api.get("/api/tasks/").status_code == 200
    assert viewer_api.get(f"/api/tasks/{waiting.pk}/").status_code == 200
    body = {"flow": "demo", "pool": "accounts"} if path == "/api/tasks/" else {"task": waiting.pk}
    error = error_of(post(viewer_api, path.format(id=waiting.pk), body), 403)
    assert error["code"] == "permission_denied" and "scheduling." in error["message"]
    assert Task.objects.get(pk=waiting.pk).state == TaskState.SCHEDULED


@pytest.mark.parametrize("method, path", [("get", "/api/tasks/"), ("get", "/api/tasks/1/"),
                                          ("post", "/api/tasks/"), ("post", "/api/tasks/1/cancel"),
                                          ("post", "/api/tasks/1/run_now"), ("post", "/api/internal/tasks/retry")])
def test_a_request_without_a_key_is_401(client, db, method, path):
    response = getattr(client, method)(path)
    assert (response.status_code, response.json()["error"]["code"]) == (401, "not_authenticated")
