"""Schemathesis against the API as it is deployed: gunicorn with deploy/gunicorn.conf.py, over
HTTP, fuzzed by the schema the server serves at GET /api/schema/ (made by the app at collection,
and proved to be the served one). Every operation is sent generated requests, valid and invalid,
with the API key of a client allowed every operation, over rows committed for the module so that
the ids and names in requests mostly name real ones. It passes when no answer is a 5xx, every
answer conforms to the schema (a status it documents, its content type, headers and body), and no
request the schema calls valid is refused (valid_request_accepted): the limits the schema states
are the ones the server enforces. Bounded (FUZZ_EXAMPLES per operation, no shrinking) to about two
minutes on two cores; marked slow."""

import json
import re
import secrets
import uuid

import httpx
import pytest
import schemathesis
from django.contrib.auth import get_user_model
from django.test import override_settings
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.renderers import OpenApiJsonRenderer
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings
from schemathesis.checks import not_a_server_error
from schemathesis.openapi.checks import RejectedPositiveData
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    positive_data_acceptance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from audit.services import create_api_client
from compensation.models import DeadLetter
from compensation.runbooks.services import request_runbook_action
from compensation.services.bulk_replay import start_bulk_replay
from compensation.services.dead_letters import collect_dead_letters
from compensation.work_orders.services import open_work_order
import resources.services
from retryops import roles
from retryops.api.schema import IDEMPOTENCY_KEY
from scheduling import services as scheduling
from tests.api_fixtures import grant
from tests.compensation.conftest import dead_tasks
from tests.conftest import empty_tables
from tests.factories import AttemptFactory, ResourceFactory, ResourcePoolFactory, RetryPolicyFactory, TaskFactory
from tests.http_server import gunicorn

# django_db: pytest-django makes the test database only for a session with a test marked so; the
# rows the server reads are committed for the whole module (live), outside each test's transaction.
pytestmark = [pytest.mark.slow, pytest.mark.django_db]

# Examples per operation (each case's own; schemathesis adds its coverage and explicit-example cases).
FUZZ_EXAMPLES = 30

BOOK = """---
name: fuzz-book
title: An action for the fuzzer
applies_to:
  flows: [demo]
actions:
  - name: note
    callable: tests.test_api_fuzz.note
    description: Changes nothing.
    input_schema: {type: object}
---
1. Nothing.
"""


def note(context):
    return {"noted": True}


def served_schema() -> dict:
    """The schema GET /api/schema/?format=json answers, made as that view makes it: pytest collects
    the operations (one test each) before any server runs, and schemathesis's loader that waits for
    a fixture (schemathesis.pytest.from_fixture) fails under pytest 9. The deployed server must
    serve this one (test_the_schema_fuzzed_is_the_one_the_deployed_server_serves)."""
    generated = SchemaGenerator().get_schema(request=None, public=True)
    return json.loads(OpenApiJsonRenderer().render(generated, renderer_context={}))


schema = schemathesis.openapi.from_dict(served_schema())
# Security parameters are ours to send (the operator's key), not random ones.
schema.config.generation.update(max_examples=FUZZ_EXAMPLES, no_shrink=True, with_security_parameters=False)


def committed_rows(runbooks) -> dict:
    """Rows of every kind an endpoint names by id, committed (the server reads them), and the key of
    "fuzz", a client allowed what every role allows and to add pools: every operation is taken as
    far as its input lets it go."""
    (runbooks / "fuzz-book.md").write_text(BOOK)
    pool = ResourcePoolFactory(name="accounts", resource_noun="account")
    policy = RetryPolicyFactory(name="default", max_attempts=5, backoff="exponential", initial_delay_seconds=120,
                                multiplier=2, max_delay_seconds=1800)
    alice, bob = ResourceFactory(pool=pool, key="alice@x"), ResourceFactory(pool=pool, key="bob@x")
    user = get_user_model().objects.create(username="svc-fuzz")
    grant(user, *{codename for codenames in roles.ROLES.values() for codename in codenames},
          "resources.add_resourcepool")
    key = create_api_client(name="fuzz", user=user, actor="test")[1]
    quarantined = ResourceFactory(pool=pool, key="carol@x")
    resources.services.quarantine(resource=quarantined.pk, actor="fuzz", reason="banned upstream")
    dead = TaskFactory(pool=pool, policy=policy, state="dead", next_run_at=None, resource=alice,
                       requested_resource=alice, strict=True, finished_at=alice.created_at, attempt_count=1)
    AttemptFactory(task=dead, resource=alice, outcome="failed", finished_at=alice.created_at)
    waiting = scheduling.start_task(flow="demo", pool_name=pool, created_by="fuzz", resource=bob.pk)
    dead_tasks(pool=pool, policy=policy, resource=alice)
    collect_dead_letters()
    letter = DeadLetter.objects.exclude(task=dead).get()  # dead_tasks's; `dead` has one of its own too
    order = open_work_order(title="fuzz", actor="fuzz", flow="demo")
    with override_settings(RETRYOPS_RUNBOOK_DIR=runbooks):
        run, _ = request_runbook_action(work_order=order, runbook="fuzz-book", action="note", input={},
                                        token="fuzz-1", actor="fuzz")
    bulk = start_bulk_replay(filter={"flow": "nothing"}, actor="fuzz")
    ids = {"tasks": [dead.pk, waiting.pk], "dead-letters": [letter.pk], "bulk-replays": [bulk.pk],
           "workorders": [order.pk, letter.work_order_id], "runbook-runs": [run.pk],
           "resources": [alice.pk, bob.pk, quarantined.pk]}
    return {"key": key, "ids": ids, "keys": ["alice@x", "bob@x", "carol@x"]}


@pytest.fixture(scope="module")
def live(django_db_setup, django_db_blocker, tmp_path_factory):
    """gunicorn as deployed, serving the rows of committed_rows (emptied again at the end): its base
    URL and those rows. Its log is kept in a file (a pipe nobody reads would stop it), its end shown
    with the module's last test's output."""
    tmp = tmp_path_factory.mktemp("fuzz")
    env = {"DEBUG": "false", "SECRET_KEY": secrets.token_hex(32), "ALLOWED_HOSTS": "127.0.0.1",
           "TEST_RUNBOOK_DIR": str(tmp), "TEST_CONN_MAX_AGE": "60"}
    with django_db_blocker.unblock():
        try:
            known = committed_rows(tmp)
            with open(tmp / "gunicorn.log", "w") as log, \
                    gunicorn(workers=1, threads=4, env=env, stderr=log) as base:
                yield {"base": base, **known}
            log = (tmp / "gunicorn.log").read_text()
            print(f"{log.count('gunicorn.access')} requests", log[-20000:])
        finally:
            empty_tables()


# Names of what exists, for the names in generated bodies (a random one names nothing).
NAMES = {"flow": "demo", "policy": "default", "pool": "accounts", "runbook": "fuzz-book", "action": "note"}


def aim(case, known) -> None:
    """Point most generated requests at rows and names that exist (a random id names none): an id,
    pool or key in the path, or a flow, policy, pool, runbook or action named in the body, that the
    generator made is replaced, chosen by the generated value, unless it ends in 7 (left as made,
    for the 404s and the unknown names). Each request has an Idempotency-Key of its own, as a
    client's has: the generator makes the same few, and a key names one request."""
    params = case.path_parameters or {}
    if "id" in params and str(params["id"]).isdigit() and not str(params["id"]).endswith("7"):
        kind = case.operation.path.split("/{id}")[0].rsplit("/", 1)[-1]
        rows = known["ids"].get(kind)
        if rows:
            params["id"] = str(rows[int(params["id"]) % len(rows)])
    if "pool" in params and not str(params["pool"]).endswith("7"):
        params["pool"] = "accounts"
    if "key" in params and not str(params["key"]).endswith("7"):
        params["key"] = known["keys"][len(str(params["key"])) % len(known["keys"])]
    if isinstance(case.body, dict):
        for name, existing in NAMES.items():
            if isinstance(case.body.get(name), str) and not case.body[name].endswith("7"):
                case.body[name] = existing
    key = (case.headers or {}).get("Idempotency-Key")
    if isinstance(key, str) and re.match(IDEMPOTENCY_KEY, key):
        case.headers["Idempotency-Key"] = f"{key[:200]}-{uuid.uuid4()}"
    # A cursor is what a `next` link carries; one made up is refused (400 on cursor), as it should be.
    if case.query and case.meta and case.meta.generation.mode.is_positive:
        case.query.pop("cursor", None)


# Refusals of a request the schema calls valid that no schema can foresee: a name that is the
# server's data (a flow registered in its code, a policy in its database, a runbook or one of its
# actions on its disk), a time bound by the server's clock (a task's first run at most a year
# ahead), a default the server takes from a resource's history (a retry without a flow, of a
# resource no task ran on yet), and a precondition on a row's current version (412 for an If-Match
# it no longer has). A limit, a format or a rule between fields refused as bad input is a finding.
UNKNOWN_NAME_CODES = {"unknown_flow", "unknown_policy", "unknown_runbook", "unknown_runbook_action"}
CLOCK_BOUND_FIELDS = {"run_at"}
HISTORY_DEFAULTS = {"/retry/": {"flow"}}


def foreseen_by_no_schema(case, response) -> bool:
    """Whether a refusal is one of those above."""
    if response.status_code == 412:
        return True
    try:
        error = response.json()["error"]
    except (ValueError, KeyError, TypeError):
        return False  # not in the API's error shape
    fields = set(error.get("details", {}).get("fields", {}))
    defaults = next((names for end, names in HISTORY_DEFAULTS.items() if case.operation.path.endswith(end)), set())
    return error.get("code") in UNKNOWN_NAME_CODES or bool(fields and fields <= CLOCK_BOUND_FIELDS | defaults)


@schemathesis.check
def valid_request_accepted(ctx, response, case):
    """schemathesis's positive_data_acceptance, but for the refusals above."""
    try:
        return positive_data_acceptance(ctx, response, case)
    except RejectedPositiveData as refused:
        if foreseen_by_no_schema(case, response):
            return None
        raise refused


CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_headers_conformance,
          response_schema_conformance, valid_request_accepted]


@schema.parametrize()
@hypothesis_settings(deadline=None, suppress_health_check=list(HealthCheck))
def test_no_answer_is_a_server_error_or_a_refused_valid_request_and_every_answer_conforms_to_the_schema(case, live):
    aim(case, live)
    case.call_and_validate(base_url=live["base"], headers={"Authorization": f"Bearer {live['key']}"},
                           checks=CHECKS)


def test_the_schema_fuzzed_is_the_one_the_deployed_server_serves(live):
    assert httpx.get(f"{live['base']}/api/schema/?format=json", timeout=60).json() == served_schema()
