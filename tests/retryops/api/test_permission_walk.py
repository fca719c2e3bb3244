"""The API's permission walk, beside the console's (tests/retryops/test_permission_walk.py): every
endpoint of /api/ that accepts POST, PUT, PATCH or DELETE, asked without a key, and by an API
client holding every permission but the ones the endpoint needs, must answer 401 / 403 and write
nothing to PostgreSQL or Redis.

It cannot pass by refusing everything: a client holding just what the table names gets past the
check (some other answer than 401 / 403) on the same request. And it cannot pass by missing an
endpoint: one that the table does not list fails test_the_walk_knows_every_state_changing_endpoint,
so a new endpoint must say here which permissions it needs."""

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission, User
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from audit.models import ApiClient
from audit.services import create_api_client
from tests.api_fixtures import keyed_client
from tests.retryops import scene as scenes
from tests.retryops.walk import routes_under, writes

pytestmark = pytest.mark.django_db

API_PREFIX = "api/"
WRITING_METHODS = ("post", "put", "patch", "delete")


@dataclass(frozen=True)
class Endpoint:
    """What an endpoint needs: any one of `needs` (each a tuple of codenames, all of which are
    needed), and the URL arguments it is walked with, taken from the scene."""

    needs: tuple[tuple[str, ...], ...]
    kwargs: Callable[[scenes.Scene], dict]


def by_id(attribute: str) -> Callable[[scenes.Scene], dict]:
    return lambda scene: {"id": getattr(scene, attribute).pk}


def by_key(attribute: str) -> Callable[[scenes.Scene], dict]:
    return lambda scene: {"pool": scene.pool.name, "key": getattr(scene, attribute).key}


def none(scene) -> dict:
    return {}


def one(*codenames: str) -> tuple[tuple[str, ...], ...]:
    return (codenames,)


CLAIM, RESET, QUARANTINE = "resources.claim_resource", "resources.reset_resource", "resources.quarantine_resource"
RETRY, CHANGE_ORDER = "scheduling.retry_resource", "compensation.change_workorder"
APPROVE, RUN = "compensation.approve_runbookrun", "compensation.run_runbook_action"

# (URL name, method) -> what it needs. A resource's actions are mounted by id and by pool and key.
ENDPOINTS: dict[tuple[str, str], Endpoint] = {
    ("api-pools", "post"): Endpoint(one("resources.add_resourcepool"), none),
    ("api-resources", "post"): Endpoint(one("resources.add_resource"), none),
    ("api-claim-next", "post"): Endpoint(one(CLAIM), none),
    **{(name + tail, method): Endpoint(needs, by_key(row) if tail else by_id(row))
       for name, method, needs, row in [
           ("api-resource", "patch", one("resources.change_resource"), "available"),
           ("api-claim", "post", one(CLAIM), "available"),
           ("api-release", "post", one(CLAIM), "held"),
           ("api-heartbeat", "post", one(CLAIM), "held"),
           ("api-reset", "post", one(RESET), "failed"),
           ("api-quarantine", "post", one(QUARANTINE), "available"),
           ("api-unquarantine", "post", one(QUARANTINE), "quarantined"),
           ("api-retry", "post", one(RETRY), "failed"),
       ] for tail in ("", "-by-key")},
    ("api-tasks", "post"): Endpoint(one(RETRY), none),
    ("api-task-cancel", "post"): Endpoint(one("scheduling.cancel_task"), by_id("waiting_task")),
    ("api-task-run-now", "post"): Endpoint(one("scheduling.run_task_now"), by_id("waiting_task")),
    ("api-internal-task-retry", "post"): Endpoint(one(RETRY), none),
    ("api-dead-letters-replay", "post"): Endpoint(one("compensation.add_bulkreplay"), none),
    ("api-dead-letter-replay", "post"): Endpoint(one("compensation.replay_deadletter"), by_id("letter")),
    ("api-dead-letter-discard", "post"): Endpoint(one("compensation.discard_deadletter"), by_id("letter")),
    ("api-dead-letter-resolve", "post"): Endpoint(one("compensation.discard_deadletter"), by_id("letter")),
    ("api-bulk-replay-cancel", "post"): Endpoint(one("compensation.change_bulkreplay"), by_id("bulk")),
    ("api-work-orders", "post"): Endpoint(one("compensation.add_workorder"), none),
    ("api-work-order", "patch"): Endpoint(one(CHANGE_ORDER), by_id("order")),
    ("api-work-order-acknowledge", "post"): Endpoint(one(CHANGE_ORDER), by_id("order")),
    ("api-work-order-start", "post"): Endpoint(one(CHANGE_ORDER), by_id("order")),
    ("api-work-order-compensate", "post"): Endpoint(one(CHANGE_ORDER), by_id("started_order")),
    ("api-work-order-close", "post"): Endpoint(one(CHANGE_ORDER), by_id("order")),
    ("api-work-order-cancel", "post"): Endpoint(one(CHANGE_ORDER), by_id("order")),
    ("api-work-order-runbook-runs", "post"): Endpoint(one(RUN), by_id("order")),
    ("api-runbook-run-approve", "post"): Endpoint(one(APPROVE), by_id("requested_run")),
    # Turned down by an approver, or withdrawn by an operator who may run actions.
    ("api-runbook-run-reject", "post"): Endpoint(((APPROVE,), (RUN,)), by_id("requested_run")),
    ("api-runbook-run-run", "post"): Endpoint(one(RUN), by_id("approved_run")),
}


def state_changing_endpoints() -> set[tuple[str, str]]:
    """(URL name, method) of every view under /api/ that accepts a writing method. A view that
    is no DRF view cannot be walked (its permissions are not DRF's) and fails the test."""
    found = set()
    for route, pattern in routes_under(API_PREFIX).items():
        view = getattr(pattern.callback, "cls", None)
        assert view is not None, f"{route} is not a DRF view: the walk cannot tell what it needs"
        assert pattern.name, f"{route} has no URL name to list it by"
        found |= {(pattern.name, method) for method in WRITING_METHODS
                  if hasattr(view, method) and method in view.http_method_names}
    return found


def test_the_walk_knows_every_state_changing_endpoint():
    registered = state_changing_endpoints()
    assert sorted(registered - ENDPOINTS.keys()) == [], "walk these too: add them to ENDPOINTS with what they need"
    assert sorted(ENDPOINTS.keys() - registered) == [], "no longer registered: remove them from ENDPOINTS"


def test_every_permission_the_walk_names_exists(db):
    named = {codename for endpoint in ENDPOINTS.values() for needs in endpoint.needs for codename in needs}
    existing = {f"{app}.{codename}" for app, codename in
                Permission.objects.values_list("content_type__app_label", "codename")}
    assert sorted(named - existing) == []


def every_permission_but(*codenames: str) -> list[Permission]:
    return [permission for permission in Permission.objects.select_related("content_type")
            if f"{permission.content_type.app_label}.{permission.codename}" not in codenames]


def just(codenames: tuple[str, ...]) -> list[Permission]:
    return [Permission.objects.get(content_type__app_label=name.split(".")[0], codename=name.split(".")[1])
            for name in codenames]


@pytest.fixture
def scene(settings, console_groups, redis_conn):
    # Not throttled: a throttle's counter is a Redis write of its own, and the walk sends many.
    settings.RETRYOPS_API_READ_RATE = settings.RETRYOPS_API_WRITE_RATE = settings.RETRYOPS_API_ANON_RATE = ""
    return scenes.build(settings)


def api_client_of(name: str) -> tuple[User, APIClient]:
    user = User.objects.create_user(username=f"svc-walk-{name}")
    client, key = create_api_client(name=f"walk-{name}", user=user, actor="test")
    # Its use is noted at most once a minute: noted "now" for the whole test, the walk's
    # requests write nothing for it.
    ApiClient.objects.filter(pk=client.pk).update(last_used_at=timezone.now() + timedelta(days=1))
    return user, keyed_client(key)


def send(client: APIClient, method: str, path: str):
    return getattr(client, method)(path, {}, format="json")


def test_no_state_changing_endpoint_acts_for_a_caller_without_its_permission(scene):
    lacking_user, lacking = api_client_of("lacking")
    allowed_user, allowed = api_client_of("allowed")
    anonymous = APIClient()
    wrong = []
    for (name, method), endpoint in sorted(ENDPOINTS.items()):
        path = reverse(name, kwargs=endpoint.kwargs(scene))
        said = f"{method.upper()} {path} ({name})"
        lacking_user.user_permissions.set(every_permission_but(*[c for needs in endpoint.needs for c in needs]))
        for who, client, refused_with in (("without a key", anonymous, 401), ("lacking it", lacking, 403)):
            with writes() as wrote:
                response = send(client, method, path)
            if response.status_code != refused_with:
                wrong.append(f"{said} {who} answered {response.status_code}, not {refused_with}: "
                             f"{response.content[:200]!r}")
            if wrote:
                wrong.append(f"{said} {who} wrote {wrote}")
        # The same request gets past the check for a client that holds what the table names:
        # the refusals above were the permission check's, not the path's or the body's.
        for needs in endpoint.needs:
            allowed_user.user_permissions.set(just(needs))
            response = send(allowed, method, path)
            if response.status_code in (401, 403):
                wrong.append(f"{said} with just {needs} answered {response.status_code}: {response.content[:200]!r}")
    assert wrong == []


def test_every_state_changing_endpoint_refuses_a_body_field_it_does_not_take_by_name(scene):
    # A typo'd field (lease_secs for lease_seconds) ignored would do what was not asked: claim
    # for the pool's 300 s. Sent with every permission, so the body is what is refused.
    user, client = api_client_of("typist")
    user.user_permissions.set(Permission.objects.all())
    wrong = []
    for (name, method), endpoint in sorted(ENDPOINTS.items()):
        path = reverse(name, kwargs=endpoint.kwargs(scene))
        with writes() as wrote:
            response = getattr(client, method)(path, {"lease_secs": 60}, format="json")
        error = response.json()["error"] if response.status_code == 400 else {}
        if (error.get("code"), list(error.get("details", {}).get("fields", {}))) != ("bad_input", ["lease_secs"]):
            wrong.append(f"{method.upper()} {path} answered {response.status_code}: {response.content[:200]!r}")
        if wrote:
            wrong.append(f"{method.upper()} {path} wrote {wrote}")
    assert wrong == []
