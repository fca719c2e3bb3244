"""The console: dead letters and work orders change only through the services, by actions."""

from datetime import timedelta

import pytest
from django.urls import reverse

from audit.models import AuditEntry
from compensation.choices import DeadLetterState, WorkOrderState
from compensation.models import BulkReplay, DeadLetter
from compensation.services.bulk_replay import start_bulk_replay
from compensation.services.dead_letters import collect_dead_letters
from compensation.services.escalation import escalate
from compensation.work_orders.models import WorkOrder
from compensation.work_orders.services import acknowledge_work_order
import resources.services
from tests.compensation.conftest import dead_tasks

pytestmark = pytest.mark.django_db


@pytest.fixture
def letters(pool, alice, instant_policy):
    dead_tasks(pool=pool, policy=instant_policy, n=2, resource=alice)
    return collect_dead_letters()


def act(client, model, action, ids):
    url = reverse(f"admin:compensation_{model}_changelist")
    return client.post(url, {"action": action, "index": 0, "_selected_action": [str(i) for i in ids]}, follow=True)


def said(response) -> str:
    return " | ".join(str(m) for m in response.context["messages"])


def test_the_dead_letter_list_shows_state_flow_resource_and_work_order(admin_client, letters):
    page = admin_client.get(reverse("admin:compensation_deadletter_changelist"))
    assert page.status_code == 200
    assert b"alice@x" in page.content and f"work order {letters[0].work_order_id}".encode() in page.content


def test_discarding_from_the_admin_goes_through_the_service_with_its_audit_entry(admin_client, letters):
    response = admin_client.post(reverse("admin:compensation_deadletter_changelist"), {
        "action": "discard", "index": 0, "_selected_action": [str(letters[0].pk)], "post": "yes",
        "reason": "test order"}, follow=True)
    assert said(response) == "Discarded 1 dead letter."
    assert DeadLetter.objects.get(pk=letters[0].pk).state == DeadLetterState.DISCARDED
    entry = AuditEntry.objects.get(action="dead_letter.discard")
    assert (entry.actor, entry.channel, entry.reason) == ("admin", "admin", "test order")


def test_a_replay_refused_in_the_admin_says_why(admin_client, letters, alice):
    resources.services.quarantine(resource=alice, actor="ops", reason="banned upstream")
    response = act(admin_client, "deadletter", "replay", [letters[0].pk])
    assert said(response).startswith(f"1 refused: #{letters[0].pk}: cannot replay") and "quarantined" in said(response)
    assert DeadLetter.objects.get(pk=letters[0].pk).state == DeadLetterState.OPEN


def test_a_dead_letter_page_writes_nothing_back(admin_client, letters):
    url = reverse("admin:compensation_deadletter_change", args=[letters[0].pk])
    assert admin_client.get(url).status_code == 200
    assert admin_client.post(url, {"state": "resolved"}).status_code == 403
    assert DeadLetter.objects.get(pk=letters[0].pk).state == DeadLetterState.OPEN


def test_the_work_order_list_shows_its_sla_state(admin_client, letters):
    page = admin_client.get(reverse("admin:compensation_workorder_changelist"))
    assert page.status_code == 200 and b">ok<" in page.content


def test_work_order_transitions_are_admin_actions_through_the_services(admin_client, letters):
    order = letters[0].work_order
    act(admin_client, "workorder", "acknowledge", [order.pk])
    response = act(admin_client, "workorder", "acknowledge", [order.pk])
    assert "1 refused" in said(response) and "it is acknowledged" in said(response)
    row = WorkOrder.objects.get(pk=order.pk)
    assert (row.state, row.assignee) == (WorkOrderState.ACKNOWLEDGED, "admin")


def test_editing_a_work_order_changes_only_what_the_operator_typed(admin_client, letters):
    order = letters[0].work_order
    url = reverse("admin:compensation_workorder_change", args=[order.pk])
    response = admin_client.post(url, {"assignee": "dave", "runbook": "refund", "notes": "called upstream",
                                       "resolution": "", "state": "closed"})
    assert response.status_code == 302
    row = WorkOrder.objects.get(pk=order.pk)
    assert (row.state, row.assignee, row.runbook, row.notes) == ("open", "dave", "refund", "called upstream")
    assert AuditEntry.objects.filter(action="work_order.change").count() == 1


def test_a_work_order_opened_in_the_admin_is_opened_by_the_service(admin_client, pool):
    response = admin_client.post(reverse("admin:compensation_workorder_add"),
                                 {"title": "Refund double charges", "flow": "", "pool": pool.pk, "assignee": "",
                                  "runbook": "", "notes": ""})
    assert response.status_code == 302
    order = WorkOrder.objects.get()
    assert (order.source, order.opened_by) == ("manual", "admin")
    assert AuditEntry.objects.filter(action="work_order.open").count() == 1


def test_bulk_replays_are_read_only(admin_client, letters):
    bulk = start_bulk_replay(filter={"flow": "demo"}, actor="ops:carol")
    assert admin_client.get(reverse("admin:compensation_bulkreplay_changelist")).status_code == 200
    # Its "add" is the start page (tests/compensation/admin/); no page writes a bulk replay's columns.
    url = reverse("admin:compensation_bulkreplay_change", args=[bulk.pk])
    assert admin_client.post(url, {"state": "finished", "done": "3"}).status_code == 403
    assert BulkReplay.objects.get(pk=bulk.pk).state == "running"


def test_the_sla_column_shows_a_breach_escalate_marked_after_the_work_order_moved_on(admin_client, letters, settings):
    order = letters[0].work_order
    escalate(now=order.first_dead_at + timedelta(seconds=settings.RETRYOPS_SLA_ACKNOWLEDGE_SECONDS + 1),
             steps="breaches")
    settings.RETRYOPS_SLA_ACKNOWLEDGE_SECONDS = 10**6  # the live clock alone would now read ok
    acknowledge_work_order(work_order=order, actor="dave")
    page = admin_client.get(reverse("admin:compensation_workorder_changelist"))
    assert b"acknowledge (since " in page.content


@pytest.fixture
def dlq_inspector_off(settings):
    settings.RETRYOPS_FLAGS_OFF = frozenset({"dlq-inspector"})


def test_with_the_dlq_inspector_off_its_pages_are_not_in_the_index(admin_client, dlq_inspector_off):
    index = admin_client.get(reverse("admin:index")).content.decode()
    assert "/admin/compensation/deadletter/" not in index and "/admin/compensation/bulkreplay/" not in index
    assert "/admin/compensation/workorder/" in index


@pytest.mark.parametrize("url", ["admin:compensation_deadletter_changelist", "admin:compensation_bulkreplay_changelist"])
def test_with_the_dlq_inspector_off_its_pages_answer_403(admin_client, letters, dlq_inspector_off, url):
    assert admin_client.get(reverse(url)).status_code == 403


def test_with_the_dlq_inspector_off_a_bulk_replay_cannot_be_cancelled(admin_client, letters, settings):
    bulk = start_bulk_replay(filter={"flow": "demo"}, actor="ops:carol")
    settings.RETRYOPS_FLAGS_OFF = frozenset({"dlq-inspector"})
    response = admin_client.post(reverse("admin:compensation_bulkreplay_cancel", args=[bulk.pk]))
    assert response.status_code == 403
    assert BulkReplay.objects.get(pk=bulk.pk).state == "running"


def test_saving_a_work_order_page_keeps_an_assignee_a_service_set_since_it_was_shown(admin_client, letters):
    order = letters[0].work_order
    shown = {"assignee": "", "runbook": "", "notes": "", "resolution": ""}
    acknowledge_work_order(work_order=order, actor="oncall:dave")  # sets the assignee meanwhile
    url = reverse("admin:compensation_workorder_change", args=[order.pk])
    posted = {**shown, "notes": "called upstream", **{f"initial-{name}": value for name, value in shown.items()}}
    assert admin_client.post(url, posted).status_code == 302
    row = WorkOrder.objects.get(pk=order.pk)
    assert (row.assignee, row.notes) == ("oncall:dave", "called upstream")
