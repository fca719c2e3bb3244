"""A real headless Chromium on pytest-django's live server, for the console's end-to-end stories.

The browser is Debian's `chromium` (/usr/bin/chromium) driven by Playwright's sync API: Playwright
never downloads a browser build here (`.ci/run` installs the apt package when it is missing). The
tests skip, saying why, only when the browser or the Playwright package is missing on a developer's
machine; in CI (`RETRYOPS_E2E=required`, which `.ci/run` exports, or `CI=true`) they fail instead,
so a CI run that never opened a browser cannot pass.

Every step a test names is saved as a screenshot under artifacts/e2e/<test>/ (git ignores it), and
the page as it was when a test failed as <test>/failed.png.

The live server (pytest-django's, one per session) runs in a thread of this process on the test
database, so the tests use transactional_db (pytest-django adds it for live_server). Flows run in
this process too, with a burst SimpleWorker on the test Redis, as in the other worker tests."""

import os
import re
import shutil
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from django.contrib.auth.models import Permission, User

from compensation.jobs import dead_letters_job
from resources.models import Resource
from scheduling import services
from scheduling.flows import flow
from scheduling.models import Task
from tests.factories import ResourceFactory, ResourcePoolFactory, RetryPolicyFactory
from tests.required import missing
from tests.scheduling.helpers import work

CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts" / "e2e"
PASSWORD = "e2e-pw-carol"
# Every wait (actions and expect): long enough for a slow CI machine's first page, short enough
# that a missing element fails soon.
TIMEOUT_MS = 15_000

# The operator's permissions: every view (the timelines' inlines need their own), retry and replay.
# replay_deadletter is the DLQ console's (issue 9), not on main yet: a codename that does not exist
# grants nothing.
OPERATOR = [
    "view_resource", "view_resourcepool", "view_resourceevent", "view_task", "view_taskevent", "view_attempt",
    "view_retrypolicy", "view_retrypolicychange", "view_batchconfig", "view_deadletter", "view_workorder",
    "retry_resource", "cancel_task", "run_task_now", "replay_deadletter",
]


_FAILED = pytest.StashKey[bool]()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if call.when == "call" and call.excinfo is not None:
        item.stash[_FAILED] = True  # also an expected failure (xfail): its page is worth seeing
    return report


@pytest.fixture(scope="package")
def browser():
    """One headless Chromium for all the end-to-end tests.

    Playwright's sync API keeps an asyncio loop marked as running in this thread while it is
    started, and Django then refuses every ORM call here (SynchronousOnlyOperation), even though
    nothing here is async. The guard is lifted only while the browser is up: package scope ends it
    before the next package's tests, which keep Django's check."""
    if not os.path.exists(CHROMIUM):
        missing(f"{CHROMIUM} is missing (Debian's chromium package)", install="apt-get install chromium")
    try:
        from playwright.sync_api import expect, sync_playwright
    except ImportError:
        missing("the playwright package is missing", install="pip install -e '.[dev]'")
    unsafe = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    expect.set_options(timeout=TIMEOUT_MS)
    playwright = sync_playwright().start()
    try:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"], headless=True)
        yield chromium
        chromium.close()
    finally:
        playwright.stop()
        if unsafe is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = unsafe


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-")[:120]


class Screens:
    """Opens the test's pages (one browser context each, so cookies never leak between tests) and
    saves a numbered screenshot of each named step into the test's artifact folder."""

    def __init__(self, browser, base_url: str, folder: Path):
        self.browser, self.base_url, self.folder = browser, base_url, folder
        self.contexts, self.pages, self.count = [], [], 0

    def open(self, *, locale: str = "en-US"):
        context = self.browser.new_context(base_url=self.base_url, locale=locale,
                                           viewport={"width": 1366, "height": 900})
        context.set_default_timeout(TIMEOUT_MS)
        self.contexts.append(context)
        page = context.new_page()
        self.pages.append(page)
        return page

    def shot(self, page, step: str) -> None:
        # A click that navigates returns before the new page has loaded: a full-page picture
        # taken then is cut at the height rendered so far.
        page.wait_for_load_state()
        self.count += 1
        self.folder.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=self.folder / f"{self.count:02d}-{_slug(step)}.png", full_page=True)

    def close(self, *, failed: bool) -> None:
        try:
            for page in self.pages if failed else ():
                if not page.is_closed():
                    self.shot(page, "failed")
        finally:
            for context in self.contexts:
                context.close()


@pytest.fixture
def screens(request, browser, live_server):
    folder = ARTIFACTS / _slug(request.node.name)
    shutil.rmtree(folder, ignore_errors=True)  # this run's pictures only
    screens = Screens(browser, live_server.url, folder)
    yield screens
    screens.close(failed=request.node.stash.get(_FAILED, False))


@pytest.fixture
def page(screens):
    """A page in English (the browser asks for en-US)."""
    return screens.open()


@pytest.fixture
def shot(screens, page):
    """shot("step") saves a screenshot of `page` as the test's next step."""
    return lambda step: screens.shot(page, step)


def log_in(page, username: str = "carol", password: str = PASSWORD) -> None:
    """Through the admin's login form, as an operator would; lands on the admin index."""
    page.goto("/admin/")
    page.locator("#id_username").fill(username)
    page.locator("#id_password").fill(password)
    page.locator("#login-form [type=submit]").click()
    # The login page's own URL (/admin/login/?next=/admin/) ends in /admin/ too: wait for the path.
    page.wait_for_url(lambda url: urlsplit(url).path == "/admin/")


# The story's data: written through the services, and flows run by a real (burst) RQ worker.

@flow("e2e_upstream_down")
def upstream_down(context):
    """The upstream every e2e story's order talks to is down: each attempt times out."""
    raise TimeoutError("upstream timed out after 30s")


@pytest.fixture
def carol(transactional_db):
    """An operator: she sees resources, tasks and dead letters, and may retry and replay."""
    user = User.objects.create_user(username="carol", password=PASSWORD, is_staff=True)
    user.user_permissions.set(Permission.objects.filter(codename__in=OPERATOR))
    return user


@pytest.fixture
def accounts(transactional_db):
    return ResourcePoolFactory(name="accounts", resource_noun="account")


@pytest.fixture
def once(transactional_db):
    """One attempt and no retry: a failure kills the task and leaves its resource failed."""
    return RetryPolicyFactory(name="once", max_attempts=1)


@pytest.fixture
def later(transactional_db):
    """Retries two minutes after a failure, holding the resource meanwhile."""
    return RetryPolicyFactory(name="later", max_attempts=5, initial_delay_seconds=120, max_delay_seconds=120)


def order(resource: Resource, number: int, policy: str) -> Task:
    """The shop starts order `number` on `resource`; the worker runs its attempt (which fails)."""
    task = services.start_task(flow="e2e_upstream_down", pool_name=resource.pool_id, payload={"order": number},
                               resource=resource, created_by="shop", policy=policy)
    work()
    return Task.objects.get(pk=task.pk)


@pytest.fixture
def dead_order(redis_conn, accounts, once) -> Task:
    """Order 42 died on alice@x (one attempt, timed out): alice is failed, and its dead letter open."""
    task = order(ResourceFactory(pool=accounts, key="alice@x"), 42, "once")
    dead_letters_job()
    return task


@pytest.fixture
def failed_alice(dead_order) -> Resource:
    return Resource.objects.get(pk=dead_order.pinned_resource_id)


@pytest.fixture
def bob(accounts) -> Resource:
    """Available, so the failed filter must leave it out."""
    return ResourceFactory(pool=accounts, key="bob@x")


@pytest.fixture
def waiting_order(redis_conn, accounts, later) -> Task:
    """Order 43 failed once on dave@x and waits two minutes for its retry, holding dave."""
    return order(ResourceFactory(pool=accounts, key="dave@x"), 43, "later")
