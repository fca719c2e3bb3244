"""Issue 22: the retry form and "retry selected" say up front what will happen. Alice's last task,
order 42, succeeded; then an external worker claimed her over the REST API (with an API key) and
released her failed. Her retry form must not offer order 42's payload as if it would run, but the
choices that work (a new payload, or order 42 once more as a new instance), and while another
worker holds her it must say who and until when before anything else. Each story
runs in English and in Chinese, with screenshots of both in artifacts/e2e/<test>/."""

import json
import re

import pytest
from django.contrib.auth.models import Permission, User

from audit.models import AuditEntry
from audit.services import create_api_client
from resources.models import Resource
from scheduling import services
from scheduling.models import Task
from tests.e2e.conftest import log_in, order
from tests.factories import ResourceFactory
from tests.scheduling.helpers import work

try:
    from playwright.sync_api import expect
except ImportError:  # the browser fixture skips or fails, saying why
    expect = None

pytestmark = pytest.mark.e2e

# What each language's page says; the browser asks for the language, Django answers in it.
SAYS = {
    "en-US": {
        "succeeded": "succeeded already: its payload again would run it a second time",
        "held_by": "is in use by billing-worker-8 until",
        "not_available": "Not available now:", "nothing_started": "Nothing was started:",
        "type_new": "Type the payload of a new run below",
        "or_tick": "or leave it empty and tick “Run it again as a new instance”",
        "type_or_tick": "type the payload to run, or tick “Run it again as a new instance”",
        "started": "Started task {task} (demo) on account alice@x, strict.",
        "outlook": "1 will start, 1 will be refused.", "will_start": "Will start: e2e_upstream_down, as task",
        "will_be_refused": "Will be refused: task {task} (demo), the last task on account alice@x, succeeded already",
        "result": "Retry selected resources: 1 of 2 started",
    },
    "zh-CN": {
        "succeeded": "已经成功：再次使用其载荷会让它运行第二次",
        "held_by": "正被 billing-worker-8 使用，直到",
        "not_available": "当前不可用：", "nothing_started": "未启动任何任务：",
        "type_new": "请在下方输入新一次运行的载荷",
        "or_tick": "请将其留空并勾选“作为新实例再次运行”",
        "type_or_tick": "或勾选“作为新实例再次运行”以再运行一次未填入的那个载荷",
        "started": "已在 account alice@x 上启动任务 {task}（demo），严格模式。",
        "outlook": "1 个将启动，1 个将被拒绝。", "will_start": "将启动：e2e_upstream_down，与任务",
        "will_be_refused": "将被拒绝：任务 {task}（demo）是 account alice@x 上的最近任务，已经成功",
        "result": "重试所选资源：2 个中已启动 1 个",
    },
}
LANGUAGES = pytest.mark.parametrize("locale", ["en-US", "zh-CN"], ids=["en", "zh-hans"])


class Worker:
    """An external worker of the billing system: it claims and releases over the REST API with
    its API key, as any integrator does, through the live server."""

    def __init__(self, screens, key: str):
        self.context = screens.browser.new_context(base_url=screens.base_url,
                                                   extra_http_headers={"Authorization": f"Bearer {key}"})
        screens.contexts.append(self.context)  # closed with the test's pages

    def _post(self, path: str, body: dict) -> dict:
        response = self.context.request.post(path, data=body)
        assert response.status == 200, (path, response.status, response.text())
        return response.json()

    def claim(self, resource: Resource, holder: str) -> str:
        return self._post(f"/api/resources/{resource.pk}/claim", {"holder": holder})["lease_token"]

    def fail(self, resource: Resource, lease_token: str, error: str) -> None:
        self._post(f"/api/resources/{resource.pk}/release",
                   {"lease_token": lease_token, "outcome": "failure", "error": error})


@pytest.fixture
def worker(screens, transactional_db) -> Worker:
    user = User.objects.create_user(username="svc-billing")
    user.user_permissions.set(Permission.objects.filter(codename="claim_resource"))
    return Worker(screens, create_api_client(name="billing", user=user, actor="ops")[1])


@pytest.fixture
def succeeded_order(redis_conn, accounts, once) -> Task:
    """Order 42 ran on alice@x and succeeded: her last task."""
    task = services.start_task(flow="demo", pool_name=accounts, payload={"order": 42}, created_by="shop",
                               resource=ResourceFactory(pool=accounts, key="alice@x"), policy="once")
    work()
    task = Task.objects.get(pk=task.pk)
    assert task.state == "succeeded"
    return task


@pytest.fixture
def alice(worker, succeeded_order) -> Resource:
    """Then billing-worker-7 claimed alice over the API and released her failed."""
    alice = Resource.objects.get(pk=succeeded_order.pinned_resource_id)
    worker.fail(alice, worker.claim(alice, "billing-worker-7"), "TimeoutError: upstream timed out after 30s")
    alice.refresh_from_db()
    assert alice.state == "failed"
    return alice


def open_failed_resources(page) -> None:
    page.goto("/admin/resources/resource/?state__exact=failed")


def retry_link(page, resource: Resource):
    return page.locator(f"#result_list a[href$='/admin/scheduling/task/retry/?resource={resource.pk}']")


@LANGUAGES
def test_the_retry_form_of_a_resource_an_external_worker_failed_tells_the_truth(screens, carol, worker, alice,
                                                                              succeeded_order, locale):
    says = SAYS[locale]
    page = screens.open(locale=locale)
    log_in(page)
    open_failed_resources(page)
    screens.shot(page, "failed resources")
    retry_link(page, alice).click()
    page.wait_for_url(f"**/admin/scheduling/task/retry/?resource={alice.pk}")

    # Order 42 succeeded: its payload is shown, not filled in, and the page says why.
    screens.shot(page, "the form leaves the succeeded payload out")
    left_out = page.locator("#retry-payload-left-out")
    expect(left_out).to_contain_text(f"{succeeded_order.pk}")
    expect(left_out).to_contain_text(says["succeeded"])
    expect(left_out).to_contain_text(says["type_new"])
    expect(page.locator("#source-payload")).to_contain_text('"order": 42')
    expect(page.locator("#id_payload")).to_have_value("")
    expect(page.locator("#id_flow")).to_have_value("demo")
    expect(page.locator("#id_strict")).to_be_checked()
    expect(page.locator("#retry-unavailable")).to_have_count(0)

    # Another worker of the billing system takes alice: the page says who holds her, first.
    lease = worker.claim(alice, "billing-worker-8")
    page.reload()
    screens.shot(page, "held by another worker: said first")
    held = page.locator("#retry-unavailable")
    expect(held).to_contain_text(says["not_available"])
    expect(held).to_contain_text(says["held_by"])
    expect(page.locator("#content-main > :first-child")).to_have_id("retry-unavailable")
    assert held.bounding_box()["y"] < page.locator("#retry-payload-left-out").bounding_box()["y"]

    # Submitted anyway, with order 42 typed back in: refused for the holder, not for the payload.
    tasks = Task.objects.count()
    page.locator("#id_payload").fill(json.dumps({"order": 42}))
    page.locator("#retry_form [type=submit]").click()
    page.wait_for_load_state()
    screens.shot(page, "submitted while held: refused naming the holder")
    expect(held).to_contain_text(says["nothing_started"])
    expect(held).to_contain_text(says["held_by"])
    expect(page.locator(".field-payload .errorlist")).to_have_count(0)
    assert Task.objects.count() == tasks

    # It fails her too; the operator retries the order that worker was on, 43, strictly on alice.
    worker.fail(alice, lease, "TimeoutError: upstream timed out after 30s")
    page.goto(f"/admin/scheduling/task/retry/?resource={alice.pk}")
    expect(page.locator("#retry-unavailable")).to_have_count(0)
    page.locator("#id_payload").fill(json.dumps({"order": 43}))
    screens.shot(page, "order 43 typed")
    page.locator("#retry_form [type=submit]").click()
    page.wait_for_url(re.compile(r"/admin/scheduling/task/\d+/change/$"))
    screens.shot(page, "started strictly on alice")
    task = Task.objects.order_by("-id").first()
    expect(page.locator(".messagelist .success")).to_have_text(says["started"].format(task=task.pk))
    assert (task.strict, task.requested_resource_id, task.payload, task.first_run_id) == (
        True, alice.pk, {"order": 43}, None)



# The other choice the form offers (branch guard's checkbox): order 42 once more, on purpose.
@LANGUAGES
def test_an_operator_runs_the_succeeded_order_once_more_by_ticking_run_it_again_as_a_new_instance(
        screens, carol, alice, succeeded_order, locale):
    page = screens.open(locale=locale)
    log_in(page)
    page.goto(f"/admin/scheduling/task/retry/?resource={alice.pk}")
    expect(page.locator("#retry-payload-left-out")).to_contain_text(SAYS[locale]["or_tick"])

    page.locator("#retry_form [type=submit]").click()  # neither typed nor ticked: nothing starts
    expect(page.locator(".field-payload .errorlist")).to_contain_text(SAYS[locale]["type_or_tick"])
    screens.shot(page, "neither a payload nor the choice: nothing started")
    assert Task.objects.count() == 1

    page.locator("#id_as_new_instance").check()
    screens.shot(page, "run it again as a new instance ticked")
    page.locator("#retry_form [type=submit]").click()
    page.wait_for_url(re.compile(r"/admin/scheduling/task/\d+/change/$"))
    screens.shot(page, "started as a new instance")
    again = Task.objects.order_by("-id").first()
    assert again.pk != succeeded_order.pk
    assert (again.payload, again.strict, again.requested_resource_id, again.first_run_id) == (
        {"order": 42}, True, alice.pk, None)
    entry = AuditEntry.objects.order_by("-id").first()
    assert (entry.after["new_instance"], entry.after["runs_again"], entry.actor) == (True, succeeded_order.pk, "carol")


@LANGUAGES
def test_retry_selected_says_before_confirming_which_will_be_refused_and_counts_truthfully(screens, carol, alice,
                                                                                         succeeded_order, locale):
    says = SAYS[locale]
    bob = ResourceFactory(pool=alice.pool, key="bob@x")
    dead = order(bob, 44, "once")  # order 44 died on bob: retrying it starts
    page = screens.open(locale=locale)
    log_in(page)
    open_failed_resources(page)
    for resource in (alice, bob):
        page.locator(f"#result_list input.action-select[value='{resource.pk}']").check()
    page.locator("select[name=action]").select_option("retry_selected")
    page.locator("#changelist-form button[name=index]").click()
    page.wait_for_load_state()

    screens.shot(page, "the confirmation says what will happen")
    expect(page.locator("#retry-outlook")).to_contain_text(says["outlook"])
    alice_row = page.locator("#content-main tbody tr", has_text="alice@x")
    bob_row = page.locator("#content-main tbody tr", has_text="bob@x")
    expect(alice_row).to_contain_text(says["will_be_refused"].format(task=succeeded_order.pk))
    expect(bob_row).to_contain_text(f"{says['will_start']} {dead.pk}")

    page.locator("#content-main form [type=submit]").click()
    page.wait_for_load_state()
    screens.shot(page, "the result counts what started")
    expect(page.locator("#content h1")).to_have_text(says["result"])
    expect(page.locator("#retry-refused")).to_contain_text("alice@x")
    expect(page.locator("#retry-started")).to_contain_text("bob@x")
    assert Task.objects.filter(requested_resource=bob, created_by="carol").count() == 1
