"""Bulk reset, quarantine and release from quarantine on the resource list, and the same from a
resource's page: a confirmation that says how many and which, one service call per resource, a
result that names each success and each refusal with its reason, permissions checked on the server."""

import pytest
from django.urls import reverse

from audit.models import AuditEntry
from resources import admin_bulk, services
from resources.choices import EventKind, ResourceState
from resources.forms import ResourceActionForm
from resources.models import Resource, ResourceEvent
from tests.factories import ResourceFactory
from tests.resources.admin.conftest import change_url, console_user, failed, logged_in


def chosen(action, *resources, index=True):
    """What the list posts when an operator ticks `resources` and picks `action`."""
    data = {"action": action, "_selected_action": [r.pk for r in resources]}
    if index:
        data["index"] = "0"
    return data


def confirmed(action, *resources, reason=""):
    """What the confirmation page posts back."""
    return {**chosen(action, *resources, index=False), "post": "yes", "reason": reason}


def state(resource) -> str:
    return Resource.objects.get(pk=resource.pk).state


@pytest.fixture
def stuck(pool):
    return failed(pool, "stuck@x")


def test_an_action_first_asks_naming_how_many_and_which(operator, list_url, pool, stuck):
    other = failed(pool, "other@x")
    response = operator.post(list_url, chosen("reset_selected", stuck, other))
    page = response.content.decode()
    assert "Reset these 2 resources?" in page and "stuck@x" in page and "other@x" in page
    assert state(stuck) == state(other) == ResourceState.FAILED


def test_a_confirmed_reset_makes_the_resources_available(operator, list_url, stuck):
    response = operator.post(list_url, confirmed("reset_selected", stuck))
    assert response.status_code == 200 and state(stuck) == ResourceState.AVAILABLE
    assert [r.key for r in response.context["outcome"].succeeded] == ["stuck@x"]


def test_a_refusal_names_the_resource_and_why_and_the_others_go_ahead(operator, list_url, pool, claimed_alice,
                                                                       stuck):
    response = operator.post(list_url, confirmed("reset_selected", claimed_alice, stuck))
    outcome = response.context["outcome"]
    assert [r.key for r in outcome.succeeded] == ["stuck@x"]
    [(refused, why)] = outcome.refused
    assert refused.key == "alice@x" and "cannot reset account alice@x: it is in use" in why
    page = response.content.decode()
    assert "Refused: 1 resource" in page and "cannot reset account alice@x: it is in use" in page
    assert state(stuck) == ResourceState.AVAILABLE and state(claimed_alice) == ResourceState.IN_USE


def test_the_operator_is_the_actor_of_each_change(operator, list_url, stuck):
    operator.post(list_url, confirmed("reset_selected", stuck, reason="upstream fixed"))
    event = ResourceEvent.objects.filter(resource=stuck, kind=EventKind.RESET).get()
    assert (event.actor, event.reason) == ("olga", "upstream fixed")
    assert AuditEntry.objects.filter(actor="olga", action="resource.reset", target_id=str(stuck.pk)).exists()


def test_a_quarantine_needs_a_reason(operator, list_url, alice):
    response = operator.post(list_url, confirmed("quarantine_selected", alice, reason=""))
    assert response.context["form"].errors["reason"] and state(alice) == ResourceState.AVAILABLE


def test_a_quarantine_keeps_its_reason(operator, list_url, alice):
    operator.post(list_url, confirmed("quarantine_selected", alice, reason="reported as stolen"))
    row = Resource.objects.get(pk=alice.pk)
    assert (row.state, row.quarantine_reason) == (ResourceState.QUARANTINED, "reported as stolen")


def test_a_reason_with_a_nul_character_is_refused_on_the_form_and_nothing_changes(operator, list_url, alice, bob):
    response = operator.post(list_url, confirmed("quarantine_selected", alice, bob, reason="bad\x00reason"))
    assert response.context["form"].errors["reason"]
    assert state(alice) == state(bob) == ResourceState.AVAILABLE


def test_a_reason_no_column_can_store_is_refused_by_the_form_naming_the_problem(db):
    form = ResourceActionForm({"reason": "bad \ud800"}, reason_required=True)
    assert not form.is_valid() and "lone surrogate" in form.errors["reason"][0]


def test_a_release_from_quarantine_makes_the_resource_available(operator, list_url, alice):
    services.quarantine(resource=alice, actor="ops", reason="stolen")
    operator.post(list_url, confirmed("unquarantine_selected", alice))
    assert state(alice) == ResourceState.AVAILABLE


def test_too_many_resources_at_once_are_refused_whole(operator, list_url, pool, stuck, monkeypatch):
    monkeypatch.setattr(admin_bulk, "MAX_BULK", 1)
    other = failed(pool, "other@x")
    response = operator.post(list_url, confirmed("reset_selected", stuck, other), follow=True)
    assert "At most 1 resources at once" in response.content.decode()
    assert state(stuck) == state(other) == ResourceState.FAILED


def test_a_resource_that_left_the_filtered_list_is_still_reported(operator, list_url, pool, stuck):
    page = operator.post(f"{list_url}?state__exact=failed", chosen("reset_selected", stuck))
    services.quarantine(resource=stuck, actor="someone else", reason="stolen")  # it leaves the filter
    assert page.context["form_action"] == "" and page.context["changelist_url"] == list_url
    response = operator.post(list_url, confirmed("reset_selected", stuck))
    [(refused, why)] = response.context["outcome"].refused
    assert refused.key == "stuck@x" and "it is quarantined" in why


# permissions, checked on the server


@pytest.mark.parametrize("action, has", [
    ("reset_selected", "quarantine_resource"),
    ("quarantine_selected", "reset_resource"),
    ("unquarantine_selected", "reset_resource"),
])
def test_a_user_without_the_permission_is_refused_the_action_and_nothing_changes(db, django_user_model, list_url,
                                                                                  pool, action, has):
    user = logged_in(console_user(django_user_model, "rita", "view_resource", has))
    resource = failed(pool, "stuck@x")
    if action == "unquarantine_selected":
        services.quarantine(resource=resource, actor="ops", reason="stolen")
    before = state(resource)
    response = user.post(list_url, confirmed(action, resource, reason="because"), follow=True)
    assert "No action selected" in response.content.decode() and state(resource) == before


# the same from a resource's page


def operation_url(resource, name):
    return reverse("admin:resources_resource_operation", args=[resource.pk, name])


def test_the_resource_page_offers_what_its_state_allows(operator, stuck):
    buttons = [b["label"] for b in operator.get(change_url(stuck)).context["console_buttons"]]
    assert buttons == ["Reset", "Quarantine"]


def test_the_resource_page_offers_a_viewer_nothing(viewer, stuck):
    assert viewer.get(change_url(stuck)).context["console_buttons"] == []


def test_a_page_button_asks_first_then_acts_and_leads_back_to_the_resource(operator, stuck):
    question = operator.get(operation_url(stuck, "reset"))
    assert "Reset this resource?" in question.content.decode() and state(stuck) == ResourceState.FAILED
    response = operator.post(operation_url(stuck, "reset"), {"post": "yes", "reason": ""})
    assert state(stuck) == ResourceState.AVAILABLE
    assert response.context["back_url"] == change_url(stuck)


@pytest.mark.parametrize("name", ["reset", "quarantine", "unquarantine"])
def test_a_page_button_without_the_permission_is_forbidden(viewer, stuck, name):
    response = viewer.post(operation_url(stuck, name), {"post": "yes", "reason": "because"})
    assert response.status_code == 403 and state(stuck) == ResourceState.FAILED


def test_an_unknown_operation_is_not_found(operator, stuck):
    assert operator.get(operation_url(stuck, "explode")).status_code == 404


def test_an_operation_on_a_missing_resource_is_not_found(operator, pool):
    ghost = ResourceFactory.build(pk=987654)
    assert operator.get(operation_url(ghost, "reset")).status_code == 404
