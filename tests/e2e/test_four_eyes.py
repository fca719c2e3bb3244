"""Four eyes in a real browser (issue 22), in English and in Chinese: an operator requests a refund
for a work order and cannot approve it herself; a superuser gives a second person the approver
role exactly as docs/console.md says (Admin -> Users -> Add user, then the role under Groups); that
person signs in through the login page and approves it. Screenshots in artifacts/e2e/<test>/."""

from urllib.parse import urlsplit

import pytest
from django.apps import apps
from django.contrib.auth.models import Group, User
from django.urls import reverse
from django.utils import translation
from django.utils.text import capfirst
from django.utils.translation import gettext

from compensation.runbooks.models import RunbookRun
from compensation.services.dead_letters import collect_dead_letters
from compensation.work_orders.models import WorkOrder
from retryops import roles
from scheduling import services
from tests.e2e.conftest import log_in
from tests.factories import ResourceFactory
from tests.scheduling.helpers import work

try:
    from playwright.sync_api import expect
except ImportError:  # the browser fixture skips or fails, saying why
    expect = None

pytestmark = pytest.mark.e2e

PASSWORDS = {"root": "e2e-pw-root-1", "carol": "e2e-pw-carol-2", "erin": "e2e-pw-erin-3"}
REFUND = {"kind": "refund", "ticket": "OPS-42"}
# Two texts of Django's user pages whose Chinese Django's catalogues lack (locale/zh_Hans has them):
# the add form's note, and the groups chooser's button (the admin's JavaScript catalogue).
ADD_USER_NOTE = {"en": "After you’ve created a user, you’ll be able to edit more user options.",
                 "zh-hans": "创建用户后，即可编辑更多用户选项。"}
CHOOSE_ALL_GROUPS = {"en": "Choose all groups", "zh-hans": "全选组"}


@pytest.fixture
def console_groups(transactional_db):
    """The roles as migration 0007 makes them: transactional tests empty every table, groups too."""
    roles.sync_groups(apps)


@pytest.fixture
def root(console_groups):
    return User.objects.create_superuser("root", password=PASSWORDS["root"])


@pytest.fixture
def carol(console_groups):
    """An operator who also approves: only four eyes stops her approving her own request. Given her
    roles from the shell, as docs/console.md's other way says; the roles make her staff."""
    user = User.objects.create_user("carol", password=PASSWORDS["carol"])
    user.groups.add(*Group.objects.filter(name__in=[roles.OPERATORS, roles.APPROVERS]))
    return user


@pytest.fixture
def refused_charge(settings, httpserver, redis_conn, accounts, once) -> WorkOrder:
    """Order 42's charge was refused by billing as a bad payload (HTTP 422) after the customer may have
    paid: the task died, and its work order suggests the refund runbook."""
    httpserver.expect_request("/charge").respond_with_json({"error": "invalid payload: amount_cents"}, status=422)
    settings.RETRYOPS_HTTP_CALL_URL = httpserver.url_for("/charge")
    services.start_task(flow="http_call", pool_name=accounts.pk, payload={"order": 42, "amount_cents": 1299},
                        resource=ResourceFactory(pool=accounts, key="alice@x"), created_by="shop", policy="once")
    work()
    collect_dead_letters()
    return WorkOrder.objects.get()


def said(language: str, message: str, **values) -> str:
    """`message` in `language`, as the admin's message list shows it (capitalised)."""
    with translation.override(language):
        return capfirst(gettext(message) % values if values else gettext(message))


def approve_form(page, run: RunbookRun):
    return page.locator(f"form[action='{reverse('admin:compensation_runbookrun_approve', args=[run.pk])}']")


@pytest.mark.parametrize("locale, language", [("en-US", "en"), ("zh-CN", "zh-hans")])
def test_a_second_person_given_the_approver_role_as_the_console_docs_say_approves_another_operators_refund(
        screens, locale, language, root, carol, refused_charge):
    order_page = reverse("admin:compensation_workorder_change", args=[refused_charge.pk])

    # Carol requests the refund from the work order's page...
    page = screens.open(locale=locale)
    log_in(page, "carol", PASSWORDS["carol"])
    page.goto(order_page)
    page.locator(f"a[href='{reverse('admin:compensation_workorder_runbooks', args=[refused_charge.pk])}']").click()
    form = page.locator("form", has=page.locator("input[name=action][value=request_refund]"))
    form.locator("textarea[name=input]").fill('{"kind": "refund", "ticket": "OPS-42"}')
    screens.shot(page, "carol fills in the refund")
    form.locator("[type=submit]").click()
    page.wait_for_url(f"**{order_page}")
    run = RunbookRun.objects.get()
    assert (run.state, run.requested_by, run.requester_identity, run.input) == ("requested", "carol", "carol", REFUND)

    # ... and is offered no approve button, told why, and refused when she approves from the list.
    expect(page.locator("#work-order-runs")).to_contain_text(
        said(language, "You requested it: another operator must approve it."))
    expect(approve_form(page, run)).to_have_count(0)
    screens.shot(page, "carol's request waits for another operator")
    page.goto(reverse("admin:compensation_runbookrun_changelist"))
    page.locator(f"input.action-select[value='{run.pk}']").check()
    page.locator("select[name=action]").select_option("approve")
    page.locator("button[name=index]").click()
    expect(page.locator(".messagelist .error")).to_contain_text(said(
        language, "%(who)s requested runbook run %(id)s and cannot approve it too: another operator must approve "
                  "an action that changes things outside RetryOps", who="carol", id=run.pk))
    screens.shot(page, "carol approving her own request is refused")
    run.refresh_from_db()
    assert run.state == "requested"

    # A superuser gives Erin the approver role as docs/console.md says: Users -> Add user, then Groups.
    admin = screens.open(locale=locale)
    log_in(admin, "root", PASSWORDS["root"])
    admin.locator("tr.model-user th a").click()
    admin.locator("a.addlink").click()
    expect(admin.locator("#content-main")).to_contain_text(ADD_USER_NOTE[language])
    admin.locator("#id_username").fill("erin")
    admin.locator("#id_password1").fill(PASSWORDS["erin"])
    admin.locator("#id_password2").fill(PASSWORDS["erin"])
    screens.shot(admin, "root adds erin")
    admin.locator("input[name=_save]").click()
    erin = User.objects.get(username="erin")
    admin.wait_for_url(f"**{reverse('admin:auth_user_change', args=[erin.pk])}")
    expect(admin.locator("#id_groups_add_all")).to_have_text(CHOOSE_ALL_GROUPS[language])
    admin.locator("#id_groups_from").select_option(label=roles.APPROVERS)
    admin.locator("#id_groups_add").click()
    screens.shot(admin, "root gives erin the approvers role")
    admin.locator("input[name=_save]").click()
    admin.wait_for_url(lambda url: urlsplit(url).path == reverse("admin:auth_user_changelist"))
    screens.shot(admin, "erin saved")
    erin.refresh_from_db()
    assert erin.is_staff and list(erin.groups.values_list("name", flat=True)) == [roles.APPROVERS]

    # Erin signs in through the login page and approves Carol's refund.
    approver = screens.open(locale=locale)
    log_in(approver, "erin", PASSWORDS["erin"])
    screens.shot(approver, "erin signed in")
    approver.goto(order_page)
    screens.shot(approver, "erin sees carol's request")
    approve_form(approver, run).locator("[type=submit]").click()
    approver.wait_for_url(f"**{order_page}")
    with translation.override(language):
        done = said(language, "approved %(run)s", run=run.display_name)
    expect(approver.locator(".messagelist .success")).to_have_text(done)
    expect(approver.locator("#work-order-runs")).to_contain_text("erin")
    screens.shot(approver, "erin approved it")
    run.refresh_from_db()
    assert (run.state, run.approved_by, run.approver_identity) == ("approved", "erin", "erin")
