"""The console's buttons on the resource pages: the retry column, "retry selected", the retry
button and the attempts on a resource's page."""

from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from audit.models import AuditEntry
from resources import admin_bulk
import resources.services
from resources.choices import ResourceState
from resources.models import Resource
from scheduling.models import Task
from tests.scheduling.admin.conftest import order_42, run
from tests.scheduling.helpers import failed_there

RESOURCES = reverse("admin:resources_resource_changelist")


def retry_link(resource) -> str:
    return f'{reverse("admin:scheduling_task_retry")}?resource={resource.pk}'


def resource_page(client, resource) -> str:
    return client.get(reverse("admin:resources_resource_change", args=[resource.pk])).content.decode()


def test_a_failed_resource_row_has_a_retry_link(carol, failed_alice):
    assert retry_link(failed_alice) in carol.get(RESOURCES).content.decode()


def test_a_quarantined_resource_row_has_a_retry_link_with_a_warning(carol, quarantined_bob):
    page = carol.get(RESOURCES).content.decode()
    warning = "Quarantined: the form says why a strict retry is refused"
    assert f'<a href="{retry_link(quarantined_bob)}" title="{warning}">' in page


def test_an_available_resource_row_has_no_retry_link(carol, alice):
    assert retry_link(alice) not in carol.get(RESOURCES).content.decode()


def test_the_retry_column_is_not_shown_without_the_permission(dave, failed_alice):
    assert retry_link(failed_alice) not in dave.get(RESOURCES).content.decode()


def test_the_resource_page_has_a_retry_button(carol, failed_alice):
    assert retry_link(failed_alice) in resource_page(carol, failed_alice)


def test_the_resource_page_has_no_retry_button_without_the_permission(dave, failed_alice):
    assert retry_link(failed_alice) not in resource_page(dave, failed_alice)


def test_the_resource_page_lists_its_attempts_with_their_tasks(carol, failed_alice, dead_order):
    panel = resource_page(carol, failed_alice).split('id="console-attempts"')[1]
    assert reverse("admin:scheduling_task_change", args=[dead_order.pk]) in panel
    assert "TimeoutError" in panel


def test_the_resource_page_costs_the_same_queries_for_one_attempt_or_many(carol, failed_alice, dead_order):
    url = reverse("admin:resources_resource_change", args=[failed_alice.pk])
    with CaptureQueriesContext(connection) as one:
        carol.get(url)
    for _ in range(3):
        run(order_42(failed_alice), error=TimeoutError("upstream slow"))
    with CaptureQueriesContext(connection) as many:
        carol.get(url)
    assert len(many.captured_queries) == len(one.captured_queries)


# retry selected


def choose(client, resources, *, confirmed: bool):
    data = {"action": "retry_selected", ACTION_CHECKBOX_NAME: [r.pk for r in resources]}
    if confirmed:
        data["post"] = "yes"
    else:
        data["index"] = 0
    return client.post(RESOURCES, data)


def refusal_row(page: str, key: str) -> str:
    """The refused table's row of `key` on the result page."""
    refused = page[page.index('id="retry-refused"'):]
    row = refused[refused.index(f">{key}</a>"):]
    return row[:row.index("</tr>")]


def test_retry_selected_first_asks_naming_how_many_and_which(carol, failed_alice, quarantined_bob):
    response = choose(carol, [failed_alice, quarantined_bob], confirmed=False)
    page = response.content.decode()
    assert "Retry these 2 resources in strict mode?" in page
    assert "alice@x" in page and "bob@x" in page and "demo, as task" in page
    assert Task.objects.count() == 1


def confirmation_row(page: str, key: str) -> str:
    """The row of `key` in the confirmation's table."""
    row = page[page.index(f">{key}</a>"):]
    return row[:row.index("</tr>")]


def test_retry_selected_first_says_which_will_start_and_which_will_be_refused_and_why(carol, externally_failed_alice,
                                                                                     succeeded_order, bob):
    dead = run(order_42(bob), error=TimeoutError("upstream slow"))
    page = choose(carol, [externally_failed_alice, bob], confirmed=False).content.decode()
    assert "1 will start, 1 will be refused." in page
    assert (f"Will be refused: task {succeeded_order.pk} (demo), the last task on account alice@x, succeeded "
            "already") in confirmation_row(page, "alice@x")
    assert f"Will start: demo, as task {dead.pk} did (policy once)" in confirmation_row(page, "bob@x")


def test_retry_selected_first_says_a_held_one_will_be_refused_naming_the_holder(carol, held_alice, succeeded_order):
    page = choose(carol, [held_alice], confirmed=False).content.decode()
    assert "Will be refused: account alice@x is in use by billing-worker-8 until" in confirmation_row(page, "alice@x")


def test_retry_selected_of_only_resources_that_would_be_refused_offers_nothing_to_confirm(carol, held_alice,
                                                                                         succeeded_order):
    page = choose(carol, [held_alice], confirmed=False).content.decode()
    assert "0 will start, 1 will be refused." in page
    assert "None of them would start now, so there is nothing to confirm." in page
    assert "Yes, retry them" not in page


def test_retry_selected_confirmed_starts_each_retryable_one(carol, failed_alice, dead_order):
    choose(carol, [failed_alice], confirmed=True)
    task = Task.objects.exclude(pk=dead_order.pk).get()
    assert (task.requested_resource_id, task.strict, task.flow) == (failed_alice.pk, True, "demo")


def test_retry_selected_says_which_started_and_why_each_other_was_refused(carol, failed_alice, bob, once):
    run(order_42(bob), error=TimeoutError("upstream slow"))
    resources.services.quarantine(resource=bob, actor="ops", reason="banned upstream")
    page = choose(carol, [failed_alice, bob], confirmed=True).content.decode()
    task = Task.objects.get(requested_resource=failed_alice, created_by="carol")
    assert "Retry selected resources: 1 of 2 started" in page
    assert f'<a href="{reverse("admin:scheduling_task_change", args=[task.pk])}">{task}</a> (demo)' in page
    assert "account bob@x is quarantined since" in refusal_row(page, "bob@x")


def test_retry_selected_of_a_resource_without_history_says_a_flow_is_needed(carol, bob):
    page = choose(carol, [bob], confirmed=True).content.decode()
    assert "no task has run on account bob@x yet: name the flow" in refusal_row(page, "bob@x")


def test_retry_selected_confirmed_from_a_filtered_list_reports_a_resource_that_left_the_filter(carol, failed_alice,
                                                                                               dead_order):
    data = {"action": "retry_selected", ACTION_CHECKBOX_NAME: [failed_alice.pk], "index": 0}
    page = carol.post(f"{RESOURCES}?state__exact=failed", data).content.decode()
    assert f'<form method="post" action="{RESOURCES}">' in page
    resources.services.quarantine(resource=failed_alice, actor="someone else", reason="stolen")  # it leaves the filter
    confirmed = carol.post(RESOURCES, {**data, "post": "yes"})
    assert "account alice@x is quarantined since" in refusal_row(confirmed.content.decode(), "alice@x")


def test_retry_selected_of_more_resources_than_one_request_acts_on_retries_none(carol, failed_alice, bob, monkeypatch):
    monkeypatch.setattr(admin_bulk, "MAX_BULK", 1)
    tasks = Task.objects.count()
    page = carol.get(choose(carol, [failed_alice, bob], confirmed=True).url).content.decode()
    assert "At most 1 resources at once" in page
    assert Task.objects.count() == tasks


def test_retry_selected_without_the_permission_starts_nothing(dave, failed_alice, dead_order):
    entries = AuditEntry.objects.count()
    choose(dave, [failed_alice], confirmed=True)
    assert Task.objects.count() == 1 and AuditEntry.objects.count() == entries
    assert Resource.objects.get(pk=failed_alice.pk).state == ResourceState.FAILED


def test_retry_selected_of_two_resources_one_order_failed_on_promises_one_start(carol, failed_alice, dead_order, bob):
    # Order 42 died after failing on alice and then on bob: the last task on both. Retried from
    # both, it would run twice: the service starts it once and refuses the other, as promised.
    failed_there(dead_order, bob, number=2)
    page = choose(carol, [failed_alice, bob], confirmed=False).content.decode()
    assert "1 will start, 1 will be refused." in page
    assert f"Will be refused: task {dead_order.pk} (demo) starts again above, on account alice@x" in confirmation_row(
        page, "bob@x")
    assert "1 of 2 started" in choose(carol, [failed_alice, bob], confirmed=True).content.decode()


def test_a_popup_of_the_resource_list_offers_no_retry_selected(carol, failed_alice):
    # The list a raw-id or related field opens to pick one resource has no actions at all, as
    # Django's own get_actions decides for a popup: nor the one the console adds.
    page = carol.get(RESOURCES, {"_popup": "1", "_to_field": "id"}).content.decode()
    assert 'value="retry_selected"' not in page and 'name="_selected_action"' not in page
