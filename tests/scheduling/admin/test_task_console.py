"""The console's task pages: cancel and run now (buttons with a confirmation, and list actions),
and "retry this resource" on a dead task's page."""

from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.admin.utils import display_for_value
from django.urls import reverse

from audit.models import AuditEntry
from scheduling.choices import TaskState
from scheduling.models import Task
from tests.scheduling.admin.conftest import order_42, run

TASKS = reverse("admin:scheduling_task_changelist")


def task_page(client, task) -> str:
    return client.get(reverse("admin:scheduling_task_change", args=[task.pk])).content.decode()


def cancel_url(task) -> str:
    return reverse("admin:scheduling_task_cancel", args=[task.pk])


def run_now_url(task) -> str:
    return reverse("admin:scheduling_task_run_now", args=[task.pk])


def snapshot(task) -> dict:
    return Task.objects.filter(pk=task.pk).values("state", "next_run_at", "finished_at").get()


def test_a_dead_task_page_offers_to_retry_its_resource(carol, dead_order):
    assert f'{reverse("admin:scheduling_task_retry")}?task={dead_order.pk}' in task_page(carol, dead_order)


def test_a_waiting_task_page_offers_no_retry_but_cancel_and_run_now(carol, waiting_order):
    page = task_page(carol, waiting_order)
    assert cancel_url(waiting_order) in page and run_now_url(waiting_order) in page
    assert f'{reverse("admin:scheduling_task_retry")}?task=' not in page


def test_a_dead_task_page_offers_neither_cancel_nor_run_now(carol, dead_order):
    page = task_page(carol, dead_order)
    assert cancel_url(dead_order) not in page and run_now_url(dead_order) not in page


def test_a_task_page_offers_no_console_button_without_the_permissions(dave, waiting_order):
    page = task_page(dave, waiting_order)
    assert cancel_url(waiting_order) not in page and run_now_url(waiting_order) not in page


def test_a_task_page_shows_its_state_and_last_error_before_its_payload(carol, waiting_order):
    page = task_page(carol, waiting_order)
    assert page.index("Last error:") < page.index("Payload:")


def task_summary(client, task) -> dict:
    """The first fieldset of a task's page as it reads: {field or method name: the value shown}."""
    adminform = client.get(reverse("admin:scheduling_task_change", args=[task.pk])).context["adminform"]
    summary = next(iter(adminform))
    return {field.field["name"]: str(field.contents()) for line in summary for field in line}


def test_a_waiting_task_page_shows_when_it_runs_next(carol, waiting_order):
    assert task_summary(carol, waiting_order)["next_run"] == display_for_value(waiting_order.next_run_at, "-")


def test_a_dead_task_page_shows_no_next_run(carol, dead_order):
    assert task_summary(carol, dead_order)["next_run"] == "-"


def test_cancel_asks_for_confirmation_first(carol, waiting_order):
    before = snapshot(waiting_order)
    page = carol.get(cancel_url(waiting_order)).content.decode()
    assert f"Cancel {waiting_order}?" in page
    assert snapshot(waiting_order) == before


def test_cancel_confirmed_cancels_the_task_with_its_reason(carol, waiting_order):
    response = carol.post(cancel_url(waiting_order), {"reason": "customer gave up"})
    assert response.url == reverse("admin:scheduling_task_change", args=[waiting_order.pk])
    assert Task.objects.get(pk=waiting_order.pk).state == TaskState.CANCELLED
    entry = AuditEntry.objects.get(action="task.cancel")
    assert (entry.actor, entry.reason) == ("carol", "customer gave up")


def test_cancel_of_a_task_that_is_not_waiting_shows_why(carol, dead_order):
    page = carol.get(carol.post(cancel_url(dead_order), {"reason": ""}).url).content.decode()
    assert f"Cannot cancel {dead_order}: it is dead" in page
    assert Task.objects.get(pk=dead_order.pk).state == TaskState.DEAD


def test_cancel_without_the_permission_is_forbidden_and_changes_nothing(dave, waiting_order):
    before = snapshot(waiting_order)
    assert dave.get(cancel_url(waiting_order)).status_code == 403
    assert dave.post(cancel_url(waiting_order), {"reason": "x"}).status_code == 403
    assert snapshot(waiting_order) == before and not AuditEntry.objects.filter(action="task.cancel").exists()


def test_run_now_confirmed_pulls_the_next_attempt_forward(carol, waiting_order):
    carol.post(run_now_url(waiting_order))
    assert Task.objects.get(pk=waiting_order.pk).next_run_at < waiting_order.next_run_at
    assert AuditEntry.objects.get(action="task.run_now").actor == "carol"


def test_run_now_without_the_permission_is_forbidden_and_changes_nothing(dave, waiting_order):
    before = snapshot(waiting_order)
    assert dave.post(run_now_url(waiting_order)).status_code == 403
    assert snapshot(waiting_order) == before


# list actions


def act(client, action, tasks):
    return client.post(TASKS, {"action": action, "index": 0, ACTION_CHECKBOX_NAME: [t.pk for t in tasks]})


def test_cancel_selected_cancels_the_waiting_and_says_why_the_others_were_not(carol, waiting_order, bob, once):
    dead = run(order_42(bob), error=TimeoutError("upstream slow"))
    page = carol.get(act(carol, "cancel_selected", [waiting_order, dead]).url).content.decode()
    assert Task.objects.get(pk=waiting_order.pk).state == TaskState.CANCELLED
    assert f"Cancelled 1: {waiting_order}." in page and f"Cannot cancel {dead}: it is dead" in page


def test_run_selected_now_pulls_each_waiting_task_forward(carol, waiting_order):
    act(carol, "run_selected_now", [waiting_order])
    assert Task.objects.get(pk=waiting_order.pk).next_run_at < waiting_order.next_run_at


def test_list_actions_without_the_permissions_change_nothing(dave, waiting_order):
    before = snapshot(waiting_order)
    for action in ("cancel_selected", "run_selected_now"):
        act(dave, action, [waiting_order])
    assert snapshot(waiting_order) == before and not AuditEntry.objects.filter(
        action__in=["task.cancel", "task.run_now"]).exists()


def test_the_task_lists_flow_filter_reads_no_distinct_flows_of_the_table(dave, dead_order, waiting_order):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as queries:
        page = dave.get(reverse("admin:scheduling_task_changelist"), {"flow": dead_order.flow})

    shown = {task.pk for task in page.context["cl"].result_list}
    assert dead_order.pk in shown and shown == set(Task.objects.filter(flow=dead_order.flow).values_list("pk", flat=True))
    assert not [q["sql"] for q in queries if "DISTINCT" in q["sql"] and "scheduling_task" in q["sql"]]
