"""Runbook runs through the API: requested for a work order, approved by a second client when
external (four eyes, enforced by the service), rejected, run once."""

import pytest
from django.test import Client
from django.urls import reverse

from audit.services import create_api_client
from compensation.runbooks.models import RunbookRun
from compensation.work_orders.models import WorkOrder
from tests.api_fixtures import grant, keyed_client
from tests.api_helpers import error_of, ok, post
from tests.compensation.admin.conftest import said
from tests.compensation.api.conftest import APPROVE, OPERATE

pytestmark = pytest.mark.django_db

BOOK = """---
name: api-book
title: Actions for the API's tests
applies_to:
  flows: [demo]
actions:
  - name: credit
    callable: tests.compensation.api.test_runbook_runs.credit
    description: Credit the customer in the app's own books.
    input_schema:
      type: object
      additionalProperties: false
      required: [amount]
      properties:
        amount: {type: integer, minimum: 1}
  - name: refund
    callable: tests.compensation.api.test_runbook_runs.credit
    description: Refund through the payment provider.
    external: true
    input_schema:
      type: object
      required: [amount]
      properties:
        amount: {type: integer, minimum: 1}
---
1. Do the thing.
"""

ran: list[dict] = []


def credit(context):
    ran.append({"run": context.run_id, "actor": context.actor})
    return {"credited": context.input["amount"]}


@pytest.fixture(autouse=True)
def runbook_dir(tmp_path, settings):
    (tmp_path / "api-book.md").write_text(BOOK)
    settings.RETRYOPS_RUNBOOK_DIR = tmp_path
    ran.clear()


@pytest.fixture
def order(letters) -> WorkOrder:
    return letters[0].work_order


def request(api, order, action="credit", amount=5, token=None):
    body = {"runbook": "api-book", "action": action, "input": {"amount": amount}}
    return post(api, f"/api/ops/workorders/{order.pk}/runbook-runs", {**body, **({"token": token} if token else {})})


def test_an_internal_action_is_ready_at_once_and_runs_with_its_result(ops, order):
    response = request(ops, order)
    run = ok(response, 201)
    assert response["Location"] == f"/api/ops/runbook-runs/{run['id']}/"
    assert (run["state"], run["requested_by"], run["external"]) == ("approved", "api:oncall", False)
    done = ok(post(ops, f"/api/ops/runbook-runs/{run['id']}/run"))
    assert (done["state"], done["result"], done["run_by"]) == ("succeeded", {"credited": 5}, "api:oncall")
    assert ran == [{"run": run["id"], "actor": "api:oncall"}]
    assert WorkOrder.objects.get(pk=order.pk).state == "in_progress"


def test_a_run_that_ran_is_not_run_again(ops, order):
    run = ok(request(ops, order), 201)
    post(ops, f"/api/ops/runbook-runs/{run['id']}/run")
    error = error_of(post(ops, f"/api/ops/runbook-runs/{run['id']}/run"), 409)
    assert (error["code"], error["details"]["from_state"]) == ("illegal_transition", "succeeded")
    assert len(ran) == 1


def test_an_external_action_waits_for_another_clients_approval(ops, approver, order):
    run = ok(request(ops, order, "refund"), 201)
    assert run["state"] == "requested"
    assert error_of(post(ops, f"/api/ops/runbook-runs/{run['id']}/run"), 409)["code"] == "approval_required"
    approved = ok(post(approver, f"/api/ops/runbook-runs/{run['id']}/approve"))
    assert (approved["state"], approved["approved_by"]) == ("approved", "api:approvals")
    assert ok(post(ops, f"/api/ops/runbook-runs/{run['id']}/run"))["state"] == "succeeded"


def test_the_client_that_requested_an_action_cannot_approve_it_too(make_api_client, order):
    both = keyed_client(make_api_client("both", *OPERATE, *APPROVE)[1])
    run = ok(request(both, order, "refund"), 201)
    error = error_of(post(both, f"/api/ops/runbook-runs/{run['id']}/approve"), 403)
    assert error["code"] == "four_eyes"
    assert RunbookRun.objects.get(pk=run["id"]).state == "requested" and not ran


# Four eyes compares the people behind requester and approver: a console user is their login, an
# API client is the service user it acts as.

@pytest.fixture
def erin(django_user_model):
    """An operator who also approves, in the console and through API clients acting as her."""
    user = django_user_model.objects.create_user(username="erin", is_staff=True)
    grant(user, *OPERATE, *APPROVE)
    return user


def client_of(user, name: str):
    return keyed_client(create_api_client(name=name, user=user, actor="test")[1])


def console_of(user) -> Client:
    console = Client()
    console.force_login(user)
    return console


def approve_in_console(console, run_id: int):
    return console.post(reverse("admin:compensation_runbookrun_approve", args=[run_id]), follow=True)


def test_a_second_client_acting_as_the_requesters_service_user_cannot_approve(erin, order):
    run = ok(request(client_of(erin, "billing-a"), order, "refund"), 201)
    error = error_of(post(client_of(erin, "billing-b"), f"/api/ops/runbook-runs/{run['id']}/approve"), 403)
    assert error["code"] == "four_eyes"
    assert error["message"].startswith(f"api:billing-b (acting as erin) cannot approve runbook run {run['id']}, "
                                       "requested by api:billing-a (acting as erin)")
    assert RunbookRun.objects.get(pk=run["id"]).state == "requested" and not ran


def test_a_console_user_cannot_approve_what_an_api_client_acting_as_them_requested(erin, order):
    run = ok(request(client_of(erin, "erins-script"), order, "refund"), 201)
    response = approve_in_console(console_of(erin), run["id"])
    assert said(response).startswith(f"erin cannot approve runbook run {run['id']}, requested by api:erins-script "
                                     "(acting as erin)")
    assert said(response).endswith("[four_eyes]")
    assert RunbookRun.objects.get(pk=run["id"]).state == "requested" and not ran


def test_the_console_offers_no_approve_button_for_what_an_api_client_acting_as_the_user_requested(erin, order):
    run = ok(request(client_of(erin, "erins-script"), order, "refund"), 201)
    page = console_of(erin).get(reverse("admin:compensation_workorder_change", args=[order.pk])).content.decode()
    assert reverse("admin:compensation_runbookrun_approve", args=[run["id"]]) not in page
    assert "You requested it: another operator must approve it." in page


def test_an_api_client_cannot_approve_what_its_service_user_requested_in_the_console(erin, order):
    url = reverse("admin:compensation_workorder_runbooks", args=[order.pk])
    console_of(erin).post(url, {"runbook": "api-book", "action": "refund", "token": "t-erin",
                                "input": '{"amount": 5}'})
    run = RunbookRun.objects.get(token="t-erin")
    error = error_of(post(client_of(erin, "erins-script"), f"/api/ops/runbook-runs/{run.pk}/approve"), 403)
    assert error["code"] == "four_eyes"
    assert RunbookRun.objects.get(pk=run.pk).state == "requested" and not ran


def test_another_console_user_approves_what_an_api_client_of_erin_requested(erin, order, django_user_model):
    frank = django_user_model.objects.create_user(username="frank", is_staff=True)
    grant(frank, *APPROVE)
    run = ok(request(client_of(erin, "erins-script"), order, "refund"), 201)
    approve_in_console(console_of(frank), run["id"])
    approved = RunbookRun.objects.get(pk=run["id"])
    assert (approved.state, approved.requested_by, approved.approved_by) == ("approved", "api:erins-script", "frank")


def test_an_operator_without_the_approvers_permission_cannot_approve(ops, order, make_api_client):
    other_operator = keyed_client(make_api_client("other", *OPERATE)[1])
    run = ok(request(ops, order, "refund"), 201)
    assert error_of(post(other_operator, f"/api/ops/runbook-runs/{run['id']}/approve"), 403)["code"] == (
        "permission_denied")


def test_an_approver_rejects_with_a_reason_and_the_run_never_runs(ops, approver, order):
    run = ok(request(ops, order, "refund"), 201)
    assert "reason" in error_of(post(approver, f"/api/ops/runbook-runs/{run['id']}/reject"), 400)["details"]["fields"]
    rejected = ok(post(approver, f"/api/ops/runbook-runs/{run['id']}/reject", {"reason": "wrong customer"}))
    assert (rejected["state"], rejected["rejected_by"], rejected["reject_reason"]) == (
        "rejected", "api:approvals", "wrong customer")
    assert error_of(post(ops, f"/api/ops/runbook-runs/{run['id']}/run"), 409)["code"] == "illegal_transition"


def test_a_reader_may_neither_request_nor_reject(reader, ops, order):
    assert error_of(request(reader, order), 403)["code"] == "permission_denied"
    run = ok(request(ops, order, "refund"), 201)
    assert error_of(post(reader, f"/api/ops/runbook-runs/{run['id']}/reject", {"reason": "no"}), 403)["code"] == (
        "permission_denied")


def test_the_same_token_answers_the_first_run_with_200_and_another_request_with_it_is_409(ops, order):
    first = ok(request(ops, order, token="t-1"), 201)
    again = request(ops, order, token="t-1")
    assert (again.status_code, again.json()) == (200, first)
    assert error_of(request(ops, order, amount=6, token="t-1"), 409)["code"] == "token_reused"
    assert RunbookRun.objects.count() == 1


@pytest.mark.parametrize("body, status, code", [
    ({"runbook": "nope", "action": "credit", "input": {"amount": 5}}, 400, "unknown_runbook"),
    ({"runbook": "api-book", "action": "nope", "input": {"amount": 5}}, 400, "unknown_runbook_action"),
    ({"runbook": "api-book", "action": "credit", "input": {"amount": 0}}, 400, "bad_input"),
    ({"runbook": "api-book", "action": "credit", "input": []}, 400, "bad_input"),
    ({"runbook": "api-book", "action": "credit", "input": {"amount": 5}, "token": "a b"}, 400, "bad_input"),
    ({"action": "credit"}, 400, "bad_input"),
])
def test_a_request_the_runbook_refuses_is_answered_with_its_code(ops, order, body, status, code):
    assert error_of(post(ops, f"/api/ops/workorders/{order.pk}/runbook-runs", body), status)["code"] == code
    assert not RunbookRun.objects.exists()


def test_a_work_orders_runs_are_listed_newest_first_and_read_one_by_one(ops, order):
    first, second = ok(request(ops, order), 201), ok(request(ops, order, "refund"), 201)
    listed = ok(ops.get(f"/api/ops/workorders/{order.pk}/runbook-runs"))["results"]
    assert [run["id"] for run in listed] == [second["id"], first["id"]]
    assert [r["id"] for r in ok(ops.get(f"/api/ops/workorders/{order.pk}/runbook-runs?state=requested"))[
        "results"]] == [second["id"]]
    assert ok(ops.get(f"/api/ops/runbook-runs/{first['id']}/"))["action"] == "credit"
    assert error_of(ops.get("/api/ops/runbook-runs/999999/"), 404)["code"] == "not_found"


def test_the_schema_says_a_repeated_token_answers_the_first_run_with_200(client):
    operation = client.get("/api/schema/?format=json").json()["paths"]["/api/ops/workorders/{id}/runbook-runs/"]["post"]
    assert {"200", "201"} <= set(operation["responses"])
    assert operation["responses"]["200"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/RunbookRun"}
