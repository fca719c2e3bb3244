"""The runbooks in the admin: suggested on a work order's page, requested from its runbook page,
approved and run as admin actions through the services."""

import re

import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse

from compensation.runbooks.models import RunbookRun
from compensation.runbooks.services import request_runbook_action

pytestmark = pytest.mark.django_db

RUNS = reverse("admin:compensation_runbookrun_changelist")


@pytest.fixture
def dave(client):
    user = get_user_model().objects.create_superuser("dave", "dave@example.com", "pw")
    client.force_login(user)
    return client


def request_refund(order, actor="admin"):
    return request_runbook_action(work_order=order, runbook="refund-failed-charges", action="request_refund",
                                  input={"kind": "credit", "ticket": "OPS-1"}, token="tok-1", actor=actor)[0]


def test_the_work_order_page_shows_the_suggested_runbooks_with_their_steps(admin_client, order):
    page = admin_client.get(reverse("admin:compensation_workorder_change", args=[order.pk])).content.decode()
    assert "Replay after an upstream outage" in page
    assert "<strong>Check the upstream is back.</strong>" in page
    assert "Quarantine banned" not in page


def test_an_action_requested_from_the_runbooks_page_runs_once_on_a_double_submit(admin_client, order):
    url = reverse("admin:compensation_workorder_runbooks", args=[order.pk])
    page = admin_client.get(url).content.decode()
    token = re.search(r'name="token" value="([0-9a-f]+)"', page).group(1)
    form = {"runbook": "replay-after-upstream-outage", "action": "resolve_dead_letters", "token": token,
            "input": '{"reason": "applied upstream after all"}'}
    assert admin_client.post(url, form).status_code == 302
    assert admin_client.post(url, form).status_code == 302
    run = RunbookRun.objects.get()
    assert (run.state, run.requested_by, run.input) == (
        "approved", "admin", {"reason": "applied upstream after all"})


def test_bad_input_on_the_runbooks_page_is_shown_and_nothing_is_requested(admin_client, order):
    url = reverse("admin:compensation_workorder_runbooks", args=[order.pk])
    form = {"runbook": "replay-after-upstream-outage", "action": "resolve_dead_letters", "token": "t",
            "input": '{"reason": 1}'}
    page = admin_client.post(url, form, follow=True).content.decode()
    assert "input.reason: 1 is not of type" in page.lower()
    assert not RunbookRun.objects.exists()


def test_input_nested_past_the_recursion_limit_is_shown_as_not_json_not_a_server_error(admin_client, order):
    url = reverse("admin:compensation_workorder_runbooks", args=[order.pk])
    form = {"runbook": "replay-after-upstream-outage", "action": "resolve_dead_letters", "token": "t",
            "input": "[" * 100_000 + "]" * 100_000}
    response = admin_client.post(url, form, follow=True)
    assert response.status_code == 200
    assert "not JSON" in response.content.decode()
    assert not RunbookRun.objects.exists()


def test_the_requester_cannot_approve_in_the_admin_and_another_operator_can(admin_client, dave, order):
    run = request_refund(order)
    page = admin_client.post(RUNS, {"action": "approve", "_selected_action": [run.pk]}, follow=True).content.decode()
    assert "cannot approve it too" in page
    run.refresh_from_db()
    assert run.state == "requested"
    dave.post(RUNS, {"action": "approve", "_selected_action": [run.pk]})
    run.refresh_from_db()
    assert (run.state, run.approved_by) == ("approved", "dave")


def test_an_internal_run_is_run_from_the_admin_and_the_work_order_shows_it(admin_client, order):
    run, _ = request_runbook_action(work_order=order, runbook="replay-after-upstream-outage",
                                    action="resolve_dead_letters", input={"reason": "done upstream"}, token="tok-2",
                                    actor="admin")
    admin_client.post(RUNS, {"action": "run", "_selected_action": [run.pk]})
    run.refresh_from_db()
    assert run.state == "succeeded"
    page = admin_client.get(reverse("admin:compensation_workorder_change", args=[order.pk])).content.decode()
    assert "resolve_dead_letters" in page and "Succeeded" in page


def test_a_run_cannot_be_edited_in_the_admin(admin_client, order):
    run = request_refund(order)
    response = admin_client.post(reverse("admin:compensation_runbookrun_change", args=[run.pk]),
                                 {"state": "approved", "approved_by": "admin"})
    assert response.status_code == 403
    run.refresh_from_db()
    assert run.state == "requested"


def test_a_runs_secret_input_and_result_are_shown_masked_on_its_page_and_its_work_orders(admin_client, order):
    run = request_refund(order)
    RunbookRun.objects.filter(pk=run.pk).update(input={"ticket": "OPS-1", "api_key": "k-s3cr3t"},
                                                result={"session_token": "t-s3cr3t", "ok": True})
    for page in (reverse("admin:compensation_runbookrun_change", args=[run.pk]),
                 reverse("admin:compensation_workorder_change", args=[order.pk])):
        text = admin_client.get(page).content.decode()
        assert "OPS-1" in text and "******" in text, page
        assert "s3cr3t" not in text, page
