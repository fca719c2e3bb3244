"""A work order's page: its three SLA clocks, its dead letters, what the on-call was told, and
its transitions (a confirmation page each, through the services, with the change permission)."""

from datetime import timedelta

import pytest
from django.urls import reverse

from audit.models import AuditEntry
from compensation.services.dead_letters import discard_dead_letter
from compensation.services.escalation import escalate
from compensation.work_orders.models import WorkOrder
from compensation.work_orders.services import acknowledge_work_order
from tests.compensation.admin.conftest import said, states

pytestmark = pytest.mark.django_db


def page(client, order):
    response = client.get(reverse("admin:compensation_workorder_change", args=[order.pk]))
    assert response.status_code == 200
    return response


def transition_url(order, action: str) -> str:
    return reverse("admin:compensation_workorder_transition", args=[order.pk, action])


def state_of(order) -> str:
    return WorkOrder.objects.get(pk=order.pk).state


def clocks(client, order) -> dict:
    return {clock["name"].split(":")[0]: clock for clock in page(client, order).context["console_clocks"]}


def test_the_page_shows_three_sla_clocks_with_their_limits(carol, order, settings):
    settings.RETRYOPS_SLA_NOTICE_SECONDS, settings.RETRYOPS_SLA_ACKNOWLEDGE_SECONDS = 90, 900
    shown = clocks(carol, order)
    assert list(shown) == ["Notice", "Acknowledge", "Compensate"]
    assert (shown["Notice"]["limit"], shown["Acknowledge"]["limit"], shown["Compensate"]["limit"]) == (
        "90 s", "15 min", "24 h 00 min")


def test_a_clock_that_is_still_running_within_its_limit_says_how_long_is_left(carol, order):
    acknowledge = clocks(carol, order)["Acknowledge"]
    assert acknowledge["tone"] == "running" and acknowledge["status"].startswith("running: ")
    assert acknowledge["stopped_at"] is None


def test_a_clock_escalation_marked_shows_when_it_ran_out_after_the_step_was_taken(carol, order, settings):
    ran_out = order.first_dead_at + timedelta(seconds=settings.RETRYOPS_SLA_ACKNOWLEDGE_SECONDS)
    escalate(now=ran_out + timedelta(seconds=1), steps="breaches")
    settings.RETRYOPS_SLA_ACKNOWLEDGE_SECONDS = 10**6  # the live clock alone would now read within its limit
    acknowledge_work_order(work_order=order, actor="dave")
    acknowledge = clocks(carol, order)["Acknowledge"]
    assert (acknowledge["tone"], acknowledge["marked_at"]) == ("breached", ran_out)
    assert "escalation marked it" in page(carol, order).content.decode()


def test_the_page_counts_its_dead_letters_by_state_and_links_to_them(carol, order, letters):
    discard_dead_letter(dead_letter=letters[0], actor="ops", reason="duplicate")
    summary = page(carol, order).context["console_dead_letters"]
    assert summary["total"] == 3
    assert [(row["label"], row["count"]) for row in summary["states"]] == [("Open", 2), ("Discarded", 1)]
    listed = carol.get(summary["states"][0]["url"]).context["cl"].result_list
    assert {d.pk for d in listed} == {letters[1].pk, letters[2].pk}


def test_the_page_offers_a_bulk_replay_of_its_open_dead_letters(carol, order):
    url = page(carol, order).context["console_dead_letters"]["bulk_replay_url"]
    assert carol.get(url).context["form"].initial == {"flow": "demo", "error_signature": "TimeoutError: slow"}


def test_the_page_shows_what_the_on_call_was_told(carol, order):
    response = page(carol, order)
    told = [(n.channel, n.event, n.state) for n in response.context["console_notifications"]]
    assert sorted(told) == [("pagerduty", "trigger", "skipped"), ("slack", "trigger", "skipped")]
    assert "Skipped (channel not configured)" in response.content.decode()


def test_an_open_work_order_offers_the_transitions_its_state_allows(carol, order):
    offered = [t["url"] for t in page(carol, order).context["console_transitions"]]
    assert offered == [transition_url(order, action) for action in ("acknowledge", "start", "close", "cancel")]


def test_acknowledge_asks_first_and_changes_nothing_yet(carol, order):
    response = carol.get(transition_url(order, "acknowledge"))
    assert response.status_code == 200 and f"Acknowledge {order}?" in response.content.decode()
    assert state_of(order) == "open"


def test_acknowledge_confirmed_acknowledges_through_the_service_and_comes_back(carol, order):
    response = carol.post(transition_url(order, "acknowledge"))
    assert response.url == reverse("admin:compensation_workorder_change", args=[order.pk])
    row = WorkOrder.objects.get(pk=order.pk)
    assert (row.state, row.assignee) == ("acknowledged", "carol")
    assert AuditEntry.objects.get(action="work_order.transition").actor == "carol"


def test_compensate_without_a_resolution_is_refused_on_the_field_and_changes_nothing(carol, order):
    acknowledge_work_order(work_order=order, actor="carol")
    response = carol.post(transition_url(order, "compensate"), {"resolution": "  "})
    assert response.context["form"].errors == {"resolution": ["resolution must not be empty"]}
    assert state_of(order) == "acknowledged"


def test_compensate_with_a_resolution_compensates_and_resolves_its_open_dead_letters(carol, order, letters):
    acknowledge_work_order(work_order=order, actor="carol")
    carol.post(transition_url(order, "compensate"), {"resolution": "refunded the three orders"})
    row = WorkOrder.objects.get(pk=order.pk)
    assert (row.state, row.resolution) == ("compensated", "refunded the three orders")
    assert states(letters) == ["resolved", "resolved", "resolved"]


def test_cancel_confirmed_keeps_its_reason_in_the_audit_entry(carol, order):
    carol.post(transition_url(order, "cancel"), {"reason": "opened for a test flow"})
    assert state_of(order) == "cancelled"
    assert AuditEntry.objects.get(action="work_order.transition").reason == "opened for a test flow"


def test_an_illegal_transition_shows_the_services_error_and_changes_nothing(carol, order):
    response = carol.post(transition_url(order, "compensate"), {"resolution": "refunded"}, follow=True)
    assert said(response) == (f"cannot compensate {order}: it is open, and only a work order that is acknowledged "
                              "or in progress can become compensated")
    assert state_of(order) == "open"


def test_an_unknown_transition_answers_404(carol, order):
    assert carol.post(transition_url(order, "reopen")).status_code == 404


@pytest.mark.parametrize("action", ["acknowledge", "cancel"])
def test_a_transition_without_the_change_permission_answers_403_and_changes_nothing(dave, order, action):
    assert dave.get(transition_url(order, action)).status_code == 403
    assert dave.post(transition_url(order, action), {"reason": "x"}).status_code == 403
    assert state_of(order) == "open"
    assert not AuditEntry.objects.filter(action="work_order.transition").exists()


def test_a_viewer_sees_the_page_without_transition_buttons(dave, order):
    response = page(dave, order)
    assert response.context["console_transitions"] == []
    assert transition_url(order, "acknowledge") not in response.content.decode()


def test_notes_the_service_refuses_are_said_on_the_page_and_nothing_is_saved(carol, order):
    url = reverse("admin:compensation_workorder_change", args=[order.pk])
    response = carol.post(url, {"assignee": "", "runbook": "", "notes": "x" * 20001, "resolution": ""}, follow=True)
    assert said(response) == "Nothing saved: notes is 20001 characters long; at most 20000 fit"
    assert WorkOrder.objects.get(pk=order.pk).notes == ""


def test_the_page_links_to_the_work_orders_audit_log(admin_client, order):
    acknowledge_work_order(work_order=order, actor="carol")
    url = page(admin_client, order).context["console_audit_url"]
    entries = admin_client.get(url).context["cl"].result_list
    assert [(e.action, e.target_id) for e in entries] == [("work_order.transition", str(order.pk))]


def test_the_audit_log_link_is_not_offered_to_who_may_not_read_it(carol, order):
    assert page(carol, order).context["console_audit_url"] == ""
