"""The secret walk, beside the permission walk (test_permission_walk.py) and on its scene: a known
secret is put under secret keys into every JSON column of the project's tables (a resource's
attributes, a task's payload and result, a batch config's payload, timeline and audit details,
runbook run input and result...), and no page of the console, for any group or a superuser, and
no GET endpoint of the API shows it. A JSON column added later is seeded too, and an API GET
endpoint that the table below does not list fails the test until it is listed."""

import pytest
from django.apps import apps
from django.db import models
from django.urls import reverse

from audit.models import AuditEntry
from audit.services import create_api_client
from tests.api_fixtures import keyed_client
from tests.retryops import scene as scenes
from tests.retryops.conftest import logged_in, member
from tests.retryops.test_permission_walk import ROUTES, UNVISITED, log_in_again, request
from tests.retryops.walk import routes_under

pytestmark = pytest.mark.django_db

SECRET = "walk-s3cr3t-7719"
# Under a secret key at the top, in a list, and as a whole object; beside keys that are not secret.
SEEDED = {"password": SECRET, "accounts": [{"user": "walk", "api_key": SECRET}],
          "credentials": {"user": "walk", "pin": SECRET}}
PROJECT_APPS = ("audit", "resources", "scheduling", "compensation", "telemetry")
APPEND_ONLY = (AuditEntry,)  # a trigger refuses UPDATE (audit migration 0002)


# Columns of a fixed shape, checked where they are read, with no place for a secret.
NOT_SEEDED = {
    "scheduling.RetryPolicy.retryable_error_patterns": "a list of regexes and {pattern, action} objects",
    "scheduling.RetryPolicy.non_retryable_error_patterns": "a list of regexes and {pattern, action} objects",
    "scheduling.BatchConfig.retryable_error_patterns": "a list of regexes",
    "compensation.BulkReplay.filter": "the dead-letter filters by name: parse_filter refuses any other key",
    # Notes (strings) of what make_storable changed; it runs on masked values, see
    # tests/scheduling/test_runner.py and tests/audit/test_services.py.
    "audit.AuditEntry.repairs": "a list of notes",
    "compensation.RunbookRun.repairs": "a list of notes",
}


def json_fields() -> list[tuple[type[models.Model], str]]:
    return [(model, field.name) for app in PROJECT_APPS for model in apps.get_app_config(app).get_models()
            for field in model._meta.get_fields()
            if isinstance(field, models.JSONField) and f"{model._meta.label}.{field.name}" not in NOT_SEEDED]


def seeded(value):
    """`value` with the secret beside what it holds: an object gains the keys, a list an entry."""
    if isinstance(value, dict):
        return {**value, **SEEDED}
    if isinstance(value, list):
        return [*value, SEEDED]
    return SEEDED


def seed_secrets() -> list[str]:
    """Put SEEDED into every JSON column of every row (bypassing the services, which would mask
    some of it: rows written before masking existed hold secrets too). A table that refuses
    updates (audit entries) gets a seeded copy of each row instead. Returns the columns that had
    no row to seed."""
    empty = []
    for model, name in json_fields():
        rows = list(model._default_manager.values_list("pk", name))
        for pk, value in rows:
            if model in APPEND_ONLY:
                continue
            model._default_manager.filter(pk=pk).update(**{name: seeded(value)})
        if not rows:
            empty.append(f"{model._meta.label}.{name}")
    for model in APPEND_ONLY:
        fields = [name for _model, name in json_fields() if _model is model]
        for row in list(model._default_manager.all()):
            row.pk = None
            for name in fields:
                setattr(row, name, seeded(getattr(row, name)))
            row.save(force_insert=True)
    return empty


@pytest.fixture
def scene(settings, console_groups, redis_conn):
    settings.RETRYOPS_API_READ_RATE = settings.RETRYOPS_API_WRITE_RATE = settings.RETRYOPS_API_ANON_RATE = ""
    built = scenes.build(settings)
    scenes.build_rq(built)
    seed_secrets()
    # The audit entry's page shows a seeded copy of the scene's first entry.
    built.rows["audit.auditentry"] = AuditEntry.objects.order_by("-id").values_list("pk", flat=True).first()
    return built


def test_the_secret_walk_seeds_the_json_the_console_shows(scene):
    # Each of these is shown on some page; a table of the scene left empty would prove nothing.
    shown = {"resources.Resource.attributes", "resources.ResourceEvent.details", "scheduling.Task.payload",
             "scheduling.Task.result", "scheduling.TaskEvent.details", "scheduling.BatchConfig.payload",
             "compensation.RunbookRun.input", "audit.AuditEntry.before", "audit.AuditEntry.after"}
    assert shown <= {f"{model._meta.label}.{name}" for model, name in json_fields()}
    assert sorted(shown & set(seed_secrets())) == []


@pytest.mark.parametrize("groups", [(), ("viewers",), ("approvers",), ("policy editors",), ("operators",), None],
                         ids=["no group", "viewers", "approvers", "policy editors", "operators", "superuser"])
def test_no_console_page_shows_a_secret(scene, groups):
    me = member("root", superuser=True) if groups is None else member("secret-walker", *groups)
    client, shown = logged_in(me), []
    for route, visits in ROUTES.items():
        if route in UNVISITED:
            continue
        for visit in visits:
            path = visit.path(scene)
            log_in_again(client, me)
            response = request(client, "get", path, {}, visit.raises)
            if response is None:
                continue
            body = b"".join(response.streaming_content) if response.streaming else response.content
            if SECRET.encode() in body:
                shown.append(f"GET {path} ({visit.name}): {response.status_code}")
    assert not shown, "\n".join(shown)


# The API's GET endpoints and the rows of the scene they are read with.
def by_id(attribute: str):
    return lambda scene: {"id": getattr(scene, attribute).pk}


API_READS = {
    "api-schema": None, "api-docs": None, "api-redoc": None,
    "api-tasks": None, "api-task": by_id("dead_task"),
    "api-dead-letters": None, "api-dead-letter": by_id("letter"),
    "api-bulk-replays": None, "api-bulk-replay": by_id("bulk"),
    "api-work-orders": None, "api-work-order": by_id("order"), "api-work-order-runbook-runs": by_id("order"),
    "api-runbook-run": by_id("requested_run"),
    "api-pools": None, "api-pool": lambda scene: {"pool": scene.pool.name},
    "api-resources": None, "api-resource": by_id("failed"),
    "api-resource-by-key": lambda scene: {"pool": scene.pool.name, "key": scene.failed.key},
    "api-retry-history": by_id("failed"),
    "api-retry-history-by-key": lambda scene: {"pool": scene.pool.name, "key": scene.failed.key},
}


def api_reads() -> set[str]:
    return {pattern.name for pattern in routes_under("api/").values()
            if hasattr(getattr(pattern.callback, "cls", None), "get")}


def test_the_secret_walk_knows_every_api_read():
    assert sorted(api_reads() ^ API_READS.keys()) == [], "list them in API_READS (or remove them)"


def test_no_api_read_shows_a_secret(scene):
    user = member("svc-secret-walk", superuser=True)  # every permission: nothing is hidden by a 403
    client = keyed_client(create_api_client(name="secret-walk", user=user, actor="test")[1])
    shown = []
    for name, kwargs in API_READS.items():
        path = reverse(name, kwargs=kwargs(scene) if kwargs else None)
        response = client.get(path)
        assert response.status_code == 200, f"GET {path}: {response.status_code}"
        if SECRET.encode() in response.content:
            shown.append(f"GET {path}")
    assert not shown, "\n".join(shown)
