"""Runbook runs in the console: requested with run_runbook_action, approved with approve_runbookrun
(never by their requester: four eyes), run with run_runbook_action, rejected with either; from a
work order's page and as list actions, each checked on the server."""

import pytest
from django.urls import reverse

from audit.models import AuditEntry
from compensation.runbooks.models import RunbookRun
from compensation.runbooks.services import request_runbook_action
from tests.compensation.admin.conftest import said

pytestmark = pytest.mark.django_db

RUNS = reverse("admin:compensation_runbookrun_changelist")


def refund(order, actor: str) -> RunbookRun:
    """An external action: it waits for another operator's approval."""
    return request_runbook_action(work_order=order, runbook="refund-failed-charges", action="request_refund",
                                  input={"kind": "credit", "ticket": "OPS-1"}, token=f"refund-{actor}", actor=actor)[0]


def resolve(order, actor: str = "carol") -> RunbookRun:
    """An internal action: ready to run as soon as it is requested."""
    return request_runbook_action(work_order=order, runbook="replay-after-upstream-outage",
                                  action="resolve_dead_letters", input={"reason": "applied upstream after all"},
                                  token="resolve-1", actor=actor)[0]


def button(run, verb: str) -> str:
    return reverse(f"admin:compensation_runbookrun_{verb}", args=[run.pk])


def work_order_page(client, order):
    return client.get(reverse("admin:compensation_workorder_change", args=[order.pk]))


def state_of(run) -> str:
    return RunbookRun.objects.get(pk=run.pk).state


def test_requesting_an_action_without_the_permission_answers_403_and_requests_nothing(dave, order):
    url = reverse("admin:compensation_workorder_runbooks", args=[order.pk])
    form = {"runbook": "replay-after-upstream-outage", "action": "resolve_dead_letters", "token": "t1",
            "input": '{"reason": "applied upstream after all"}'}
    assert dave.post(url, form).status_code == 403
    assert not RunbookRun.objects.exists()


def test_a_viewer_reads_the_runbooks_without_the_forms_to_request_them(dave, order):
    page = dave.get(reverse("admin:compensation_workorder_runbooks", args=[order.pk])).content.decode()
    assert "Replay after an upstream outage" in page and 'name="token"' not in page


def test_an_approver_approves_another_operators_request_from_the_work_order_page(erin, order):
    run = refund(order, "carol")
    assert button(run, "approve") in work_order_page(erin, order).content.decode()
    response = erin.post(button(run, "approve"))
    assert response.url == reverse("admin:compensation_workorder_change", args=[order.pk])
    run.refresh_from_db()
    assert (run.state, run.approved_by) == ("approved", "erin")


def test_the_requester_is_offered_no_approve_button_and_told_why(erin, order):
    run = refund(order, "erin")
    page = work_order_page(erin, order).content.decode()
    assert button(run, "approve") not in page
    assert "You requested it: another operator must approve it." in page


def test_the_requester_approving_anyway_is_refused_by_the_four_eyes_rule(erin, order):
    run = refund(order, "erin")
    response = erin.post(button(run, "approve"), follow=True)
    assert "erin requested runbook run" in said(response) and "cannot approve it too" in said(response)
    assert state_of(run) == "requested"


def test_approving_without_the_approve_permission_answers_403_and_changes_nothing(carol, order):
    run = refund(order, "erin")
    assert carol.post(button(run, "approve")).status_code == 403
    assert state_of(run) == "requested"


def test_an_approve_button_does_nothing_on_a_get(erin, order):
    run = refund(order, "carol")
    assert erin.get(button(run, "approve")).status_code == 405
    assert state_of(run) == "requested"


def test_an_operator_runs_a_ready_action_from_the_work_order_page(carol, order):
    run = resolve(order)
    assert button(run, "run") in work_order_page(carol, order).content.decode()
    response = carol.post(button(run, "run"), follow=True)
    assert said(response) == f"{run} ran and succeeded."
    assert state_of(run) == "succeeded"


def test_running_without_the_run_permission_answers_403_and_changes_nothing(erin, order):
    run = resolve(order)
    assert erin.post(button(run, "run")).status_code == 403
    assert state_of(run) == "approved"


def test_rejecting_asks_for_a_reason_and_keeps_it_on_the_run(erin, order):
    run = refund(order, "carol")
    assert erin.get(button(run, "reject")).status_code == 200
    assert state_of(run) == "requested"
    erin.post(button(run, "reject"), {"reason": "the ticket is closed"})
    run.refresh_from_db()
    assert (run.state, run.rejected_by, run.reject_reason) == ("rejected", "erin", "the ticket is closed")


def test_rejecting_without_a_reason_is_refused_on_the_form(erin, order):
    run = refund(order, "carol")
    response = erin.post(button(run, "reject"), {"reason": ""})
    assert response.context["form"].errors == {"reason": ["This field is required."]}
    assert state_of(run) == "requested"


def test_rejecting_without_either_permission_answers_403_and_changes_nothing(dave, order):
    run = refund(order, "carol")
    assert dave.get(button(run, "reject")).status_code == 403
    assert dave.post(button(run, "reject"), {"reason": "no"}).status_code == 403
    assert state_of(run) == "requested"


@pytest.mark.parametrize(("who", "action"), [("carol", "approve"), ("erin", "run"), ("dave", "reject")])
def test_a_list_action_without_its_permission_is_refused_and_changes_nothing(request, order, who, action):
    run = refund(order, "someone") if action != "run" else resolve(order)
    before = state_of(run)
    request.getfixturevalue(who).post(RUNS, {"action": action, "_selected_action": [run.pk]}, follow=True)
    assert state_of(run) == before
    assert not AuditEntry.objects.filter(action__in=["runbook.approve", "runbook.run", "runbook.reject"]).exists()


def test_a_viewer_is_offered_no_runbook_button_on_the_work_order_page(dave, order):
    run = refund(order, "carol")
    page = work_order_page(dave, order).content.decode()
    assert not any(button(run, verb) in page for verb in ("approve", "run", "reject"))
