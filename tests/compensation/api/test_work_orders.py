"""The work order endpoints: opened by hand, listed with filters, read with their SLA clocks,
edited where operators edit them, and moved through each transition the services offer."""

import pytest

from audit.models import AuditEntry
from compensation.models import DeadLetter
from compensation.work_orders.models import WorkOrder
from tests.api_helpers import error_of, ok, post
from tests.factories import WorkOrderFactory

pytestmark = pytest.mark.django_db

ORDERS = "/api/ops/workorders"


@pytest.fixture
def order(db) -> WorkOrder:
    return WorkOrderFactory(title="refunds stuck", flow="demo")


def test_a_work_order_is_opened_by_hand_with_its_location_and_audited(ops, pool):
    response = post(ops, ORDERS, {"title": "charge twice for order 42", "pool": "accounts", "assignee": "carol"})
    body = ok(response, 201)
    order = WorkOrder.objects.get()
    assert response["Location"] == f"/api/ops/workorders/{order.pk}/"
    assert (body["source"], body["state"], body["pool"], body["assignee"], body["opened_by"]) == (
        "manual", "open", "accounts", "carol", "api:oncall")
    assert AuditEntry.objects.get(action="work_order.open").actor == "api:oncall"


@pytest.mark.parametrize("body, field", [({}, "title"), ({"title": ""}, "title"), ({"title": 5}, "title"),
                                         ({"title": "x" * 301}, "title"), ({"title": "t", "notes": "a\u0000"}, "notes")])
def test_a_bad_work_order_is_400_naming_the_field(ops, db, body, field):
    assert field in error_of(post(ops, ORDERS, body), 400)["details"]["fields"]


def test_work_orders_are_listed_newest_first_and_filtered(ops, letters, order):
    grouped = letters[0].work_order

    def ids(query=""):
        return [o["id"] for o in ok(ops.get(f"{ORDERS}/?{query}"))["results"]]

    assert ids() == [order.pk, grouped.pk]
    assert ids("source=dead_letters") == [grouped.pk]
    assert ids("pool=accounts") == [grouped.pk]
    assert ids(f"error_signature={grouped.error_signature.replace(' ', '%20')}") == [grouped.pk]
    assert ids("state=closed") == []


def test_a_work_order_is_read_with_its_sla_clocks_and_its_dead_letters_states(ops, letters):
    body = ok(ops.get(f"{ORDERS}/{letters[0].work_order_id}/"))
    assert [clock["name"] for clock in body["sla"]] == ["notice", "acknowledge", "compensate"]
    assert (body["dead_letter_states"], body["dead_letter_count"]) == ({"open": 2}, 2)


def test_an_operator_edits_assignee_and_notes_and_the_change_is_audited(ops, order):
    body = ok(ops.patch(f"{ORDERS}/{order.pk}/", {"assignee": "dave", "notes": "waiting on billing"}, format="json"))
    assert (body["assignee"], body["notes"], body["state"]) == ("dave", "waiting on billing", "open")
    assert AuditEntry.objects.get(action="work_order.change").actor == "api:oncall"


@pytest.mark.parametrize("field", ["state", "dead_letter_count", "colour"])
def test_a_patch_of_what_operators_do_not_edit_is_400_naming_it(ops, order, field):
    error = error_of(ops.patch(f"{ORDERS}/{order.pk}/", {field: "closed"}, format="json"), 400)
    assert list(error["details"]["fields"]) == [field]
    assert WorkOrder.objects.get(pk=order.pk).state == "open"


def test_a_patch_of_a_closed_work_order_is_409(ops, order):
    ok(post(ops, f"{ORDERS}/{order.pk}/close"))
    error = error_of(ops.patch(f"{ORDERS}/{order.pk}/", {"notes": "late"}, format="json"), 409)
    assert error["code"] == "illegal_transition"


def test_a_work_order_goes_from_acknowledged_through_started_to_compensated(ops, letters):
    order = letters[0].work_order_id
    body = ok(post(ops, f"{ORDERS}/{order}/acknowledge"))
    assert (body["state"], body["assignee"]) == ("acknowledged", "api:oncall")
    assert ok(post(ops, f"{ORDERS}/{order}/start", {"runbook": "replay-after-upstream-outage"}))["runbook"] == (
        "replay-after-upstream-outage")
    body = ok(post(ops, f"{ORDERS}/{order}/compensate", {"resolution": "refunded by hand"}))
    assert (body["state"], body["resolution"]) == ("compensated", "refunded by hand")
    assert set(DeadLetter.objects.values_list("state", flat=True)) == {"resolved"}
    assert AuditEntry.objects.filter(action="work_order.transition").count() == 3


def test_compensate_needs_its_resolution(ops, order):
    ok(post(ops, f"{ORDERS}/{order.pk}/acknowledge"))
    assert "resolution" in error_of(post(ops, f"{ORDERS}/{order.pk}/compensate"), 400)["details"]["fields"]


def test_cancel_needs_its_reason_and_leaves_the_dead_letters_open(ops, letters):
    order = letters[0].work_order_id
    assert "reason" in error_of(post(ops, f"{ORDERS}/{order}/cancel"), 400)["details"]["fields"]
    assert ok(post(ops, f"{ORDERS}/{order}/cancel", {"reason": "opened by mistake"}))["state"] == "cancelled"
    assert set(DeadLetter.objects.values_list("state", flat=True)) == {"open"}


def test_close_resolves_its_open_dead_letters(ops, letters):
    body = ok(post(ops, f"{ORDERS}/{letters[0].work_order_id}/close", {"resolution": "nothing to do"}))
    assert body["state"] == "closed" and body["ended_at"]
    assert set(DeadLetter.objects.values_list("state", flat=True)) == {"resolved"}


@pytest.mark.parametrize("transition, body", [("acknowledge", {}), ("start", {}),
                                              ("compensate", {"resolution": "done"}), ("close", {}),
                                              ("cancel", {"reason": "mistake"})])
def test_a_transition_the_state_does_not_allow_is_409_naming_both_states(ops, order, transition, body):
    ok(post(ops, f"{ORDERS}/{order.pk}/close"))
    error = error_of(post(ops, f"{ORDERS}/{order.pk}/{transition}", body), 409)
    assert (error["code"], error["details"]["from_state"], error["details"]["action"]) == (
        "illegal_transition", "closed", transition)


@pytest.mark.parametrize("method, path", [("get", f"{ORDERS}/999999/"), ("get", f"{ORDERS}/999999/runbook-runs"),
                                          ("patch", f"{ORDERS}/999999/"), ("post", f"{ORDERS}/999999/acknowledge"),
                                          ("post", f"{ORDERS}/999999/close")])
def test_an_unknown_work_order_is_404(ops, db, method, path):
    assert error_of(getattr(ops, method)(path, {}, format="json"), 404)["code"] == "not_found"


@pytest.mark.parametrize("method, path, body", [
    ("post", ORDERS, {"title": "x"}), ("patch", f"{ORDERS}/{{id}}/", {"notes": "x"}),
    ("post", f"{ORDERS}/{{id}}/acknowledge", {}), ("post", f"{ORDERS}/{{id}}/cancel", {"reason": "x"}),
])
def test_a_reader_reads_work_orders_but_is_refused_every_change_with_403(reader, order, method, path, body):
    assert reader.get(f"{ORDERS}/{order.pk}/").status_code == 200
    response = getattr(reader, method)(path.format(id=order.pk), body, format="json")
    assert error_of(response, 403)["code"] == "permission_denied"
    assert WorkOrder.objects.get(pk=order.pk).state == "open"


@pytest.mark.parametrize("method, path", [("get", f"{ORDERS}/"), ("post", ORDERS), ("patch", f"{ORDERS}/1/"),
                                          ("post", f"{ORDERS}/1/close"), ("get", "/api/ops/runbook-runs/1/")])
def test_a_request_without_a_key_is_401(client, db, method, path):
    assert getattr(client, method)(path).status_code == 401
