"""The operator console in a real browser (issue 9): each test is one operator's story, from the
login form on, with a screenshot of every step in artifacts/e2e/<test>/."""

import re
from urllib.parse import urlsplit

import pytest
from django.utils import timezone

from audit.models import AuditEntry
from compensation.choices import DeadLetterState
from compensation.jobs import dead_letters_job
from compensation.models import DeadLetter
from resources.models import Resource
from scheduling.models import Task
from tests.e2e.conftest import log_in, order
from tests.factories import ResourceFactory, ResourcePoolFactory

try:
    from playwright.sync_api import expect
except ImportError:  # the browser fixture skips or fails, saying why
    expect = None

pytestmark = pytest.mark.e2e

CHINESE = re.compile(r"[\u4e00-\u9fff]")


def open_resources(page) -> None:
    page.locator("tr.model-resource th a").click()
    page.wait_for_url("**/admin/resources/resource/")


def filter_state(page, state: str) -> None:
    page.locator("#changelist-filter details[data-filter-title='state']").get_by_role(
        "link", name=state, exact=True).click()


def row_of(page, key: str):
    return page.locator("#result_list tbody tr", has_text=key)


def test_an_operator_retries_a_failed_resource_from_the_failed_list_and_lands_on_its_new_task(
        page, shot, carol, failed_alice, dead_order, bob):
    log_in(page)
    shot("logged in")
    open_resources(page)
    filter_state(page, "Failed")
    shot("resources filtered to failed")
    expect(page.locator("#result_list tbody tr")).to_have_count(1)
    expect(row_of(page, "alice@x")).to_be_visible()

    row_of(page, "alice@x").get_by_role("link", name="Retry", exact=True).click()
    page.wait_for_url(f"**/admin/scheduling/task/retry/?resource={failed_alice.pk}")
    shot("retry form pre-filled")
    expect(page.locator("#id_key")).to_have_value("alice@x")
    expect(page.locator("#id_key")).to_be_disabled()
    expect(page.locator("#id_flow")).to_have_value("e2e_upstream_down")
    expect(page.locator("#id_payload")).to_have_value(re.compile(r'"order": 42'))
    expect(page.locator("#id_policy")).to_have_value("once")
    expect(page.locator("#id_strict")).to_be_checked()

    page.locator("#retry_form [type=submit]").click()
    page.wait_for_url(re.compile(r"/admin/scheduling/task/\d+/change/$"))
    shot("the new task")
    task = Task.objects.exclude(pk=dead_order.pk).get()
    assert page.url.endswith(f"/admin/scheduling/task/{task.pk}/change/")
    expect(page.locator(".messagelist .success")).to_have_text(
        f"Started {task} (e2e_upstream_down) on account alice@x, strict.")
    assert (task.strict, task.requested_resource_id, task.payload, task.created_by) == (
        True, failed_alice.pk, {"order": 42}, "carol")


def test_retrying_a_resource_in_use_shows_who_holds_it_and_starts_no_task(page, shot, carol, waiting_order):
    dave = Resource.objects.get(pk=waiting_order.pinned_resource_id)
    log_in(page)
    open_resources(page)
    filter_state(page, "In use")
    shot("resources filtered to in use")
    row_of(page, "dave@x").get_by_role("link", name="dave@x").click()
    shot("dave's page")
    page.locator(".object-tools").get_by_role("link", name="Retry this resource").click()
    shot("retry form for a resource in use")
    expect(page.locator("#id_strict")).to_be_checked()
    tasks, entries = Task.objects.count(), AuditEntry.objects.count()

    page.locator("#retry_form [type=submit]").click()
    refusal = page.locator("#retry-unavailable")  # said first, above the form
    expect(refusal).to_contain_text(f"Nothing was started: account dave@x is in use by {waiting_order} "
                                    "(e2e_upstream_down) until")
    expect(refusal).to_contain_text("it is retrying and runs next at")
    shot("the refusal")
    assert f"/admin/scheduling/task/retry/?resource={dave.pk}" in page.url
    assert (Task.objects.count(), AuditEntry.objects.count()) == (tasks, entries)


def test_an_operator_replays_a_dead_letter_from_the_dead_letter_list(page, shot, carol, dead_order):
    letter = DeadLetter.objects.get(task=dead_order)
    log_in(page)
    page.locator("tr.model-deadletter th a").click()
    page.wait_for_url(lambda url: urlsplit(url).path == "/admin/compensation/deadletter/")
    shot("dead letters")
    row = page.locator("#result_list tbody tr", has=page.locator(f"input.action-select[value='{letter.pk}']"))
    expect(row).to_contain_text("Open")
    row.locator("input.action-select").check()
    page.locator("select[name=action]").select_option(label="Replay on the same resource")
    shot("replay chosen")
    page.get_by_role("button", name="Go").click()
    expect(page.locator(".messagelist .success")).to_contain_text(f"Replaying dead letter {letter.pk} as task ")
    letter.refresh_from_db()
    assert letter.state == DeadLetterState.REPLAYING and letter.replay_task is not None
    expect(page.locator(".messagelist .success")).to_have_text(
        f"Replaying dead letter {letter.pk} as task {letter.replay_task_id}.")
    shot("replaying")
    expect(row).to_contain_text("Replaying")
    expect(row).to_contain_text(str(letter.replay_task))

    page.locator(".messagelist .success").get_by_role("link", name=f"task {letter.replay_task_id}").click()
    page.wait_for_url(f"**/admin/scheduling/task/{letter.replay_task_id}/change/")
    shot("the replay's task")


# The dashboard panel on the admin index (not the index's <body class="dashboard">, which every
# admin index has).
DASHBOARD = "#ops-dashboard"


def test_the_dashboard_shows_a_new_failure_without_a_reload(page, shot, carol, accounts, once, redis_conn):
    log_in(page)
    panel = page.locator(DASHBOARD)
    assert panel.count() == 1, "the admin index has no dashboard panel"
    shot("dashboard before the failure")
    expect(panel).not_to_contain_text("e2e_upstream_down")
    page.evaluate("window.e2eSamePage = true")  # a reload would forget it

    order(ResourceFactory(pool=accounts, key="erin@x"), 44, "once")  # dies
    dead_letters_job()  # the ops process's step: a new dead letter of that flow

    # It refreshes itself every few seconds: its "DLQ by flow" now names the flow.
    expect(panel).to_contain_text("e2e_upstream_down", timeout=30_000)
    shot("dashboard after the failure")
    assert page.evaluate("window.e2eSamePage === true")


def test_a_failed_resources_diagnosis_is_on_screen_at_1366_px_without_scrolling_the_list(page, shot, carol):
    # Shaped like the demo's pool: its keys and its pool's name are what the list is widest with.
    ResourceFactory(pool=ResourcePoolFactory(name="demo-accounts"), key="user07@demo.example", state="failed",
                    failure_count=1, success_count=12, consecutive_failures=1, last_failure_category="non_retryable",
                    last_failure_reason="PermissionError: HTTP 403: account suspended by upstream",
                    last_failure_at=timezone.now(), last_success_at=timezone.now())
    log_in(page)
    open_resources(page)
    filter_state(page, "Failed")
    shot("failed resources at 1366 px")
    diagnosis = row_of(page, "user07@demo.example").locator("td.field-diagnosis_badge")
    expect(diagnosis).to_have_text("Unclear")
    shown = page.locator("#changelist .results").bounding_box()
    cell = diagnosis.bounding_box()
    assert cell["x"] + cell["width"] <= shown["x"] + shown["width"], "the diagnosis is past the list's right edge"


def test_a_browser_asking_for_chinese_gets_the_console_in_chinese(screens, carol, failed_alice):
    page = screens.open(locale="zh-CN")  # Accept-Language: zh-CN, which Django serves as zh-hans
    log_in(page)
    screens.shot(page, "index in Chinese")
    assert page.locator("#content h1").inner_text() == "站点管理"
    open_resources(page)
    screens.shot(page, "resources in Chinese")
    headers = page.locator("#result_list thead th:not(.action-checkbox-column)").all_inner_texts()
    assert headers and all(CHINESE.search(h) for h in headers), headers


def test_an_operator_switches_the_console_to_chinese_and_it_stays_chinese(page, shot, carol):
    log_in(page)  # the browser asks for English
    page.locator("#language-switcher-select").select_option("zh-hans")
    page.wait_for_url("**/admin/")
    shot("switched to Chinese")
    expect(page.locator("#site-name")).to_have_text("RetryOps 控制台")
    expect(page.locator("#content h1")).to_have_text("站点管理")

    open_resources(page)
    shot("resources still in Chinese")
    expect(page.locator("html")).to_have_attribute("lang", "zh-hans")
    expect(page.locator("#language-switcher-select")).to_have_value("zh-hans")
