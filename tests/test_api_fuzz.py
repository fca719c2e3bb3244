"""Schemathesis against the project's own OpenAPI schema, as GET /api/schema/ serves it: every
operation is sent generated requests, valid and invalid, through the WSGI app with the API key of
an operator's client, over data the factories made so that the ids in paths name real rows. It
passes when no answer is a 5xx and every answer conforms to the schema (its status, content type,
headers and body). Bounded (FUZZ_EXAMPLES per operation, no shrinking) so it takes a few minutes
on two cores; marked slow."""

import json

import pytest
import schemathesis
from django.core import signals
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.renderers import OpenApiJsonRenderer
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from compensation import services as compensation
from compensation.models import DeadLetter
from compensation.services.runbooks import request_runbook_action
from resources import services as pool_services
from retryops import roles
from scheduling import services as scheduling
from tests.compensation.conftest import dead_tasks
from tests.factories import AttemptFactory, ResourceFactory, TaskFactory

pytestmark = [pytest.mark.slow, pytest.mark.django_db]

# Examples per operation (each case's own; schemathesis adds its coverage and explicit-example cases).
FUZZ_EXAMPLES = 40
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_headers_conformance,
          response_schema_conformance]


def served_schema() -> dict:
    """The schema GET /api/schema/?format=json answers, made as that view makes it, without a
    request: collecting this module sends nothing to the app (nor to its throttle's Redis)."""
    generated = SchemaGenerator().get_schema(request=None, public=True)
    return json.loads(OpenApiJsonRenderer().render(generated, renderer_context={}))


schema = schemathesis.openapi.from_dict(served_schema())
schema.app = get_wsgi_application()
# Security parameters are ours to send (the operator's key), not random ones.
schema.config.generation.update(max_examples=FUZZ_EXAMPLES, no_shrink=True, with_security_parameters=False)

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


@pytest.fixture(autouse=True)
def connection_kept():
    """The WSGI handler closes the database connection after each request, and with it the test's
    transaction; Django's own test client keeps it open the same way."""
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    yield
    signals.request_started.connect(close_old_connections)
    signals.request_finished.connect(close_old_connections)


@pytest.fixture
def known(tmp_path, settings, make_api_client, pool, alice, bob, default_policy):
    """Rows of every kind an endpoint names by id, and the key of "fuzz", an operator's client."""
    (tmp_path / "fuzz-book.md").write_text(BOOK)
    settings.RETRYOPS_RUNBOOK_DIR = tmp_path
    key = make_api_client("fuzz", *roles.ROLES[roles.OPERATORS])[1]
    quarantined = ResourceFactory(pool=pool, key="carol@x")
    pool_services.quarantine(resource=quarantined.pk, actor="fuzz", reason="banned upstream")
    dead = TaskFactory(pool=pool, policy=default_policy, state="dead", next_run_at=None, resource=alice,
                       requested_resource=alice, strict=True, finished_at=alice.created_at, attempt_count=1)
    AttemptFactory(task=dead, resource=alice, outcome="failed", finished_at=alice.created_at)
    waiting = scheduling.start_task(flow="demo", pool_name=pool, created_by="fuzz", resource=bob.pk)
    dead_tasks(pool=pool, policy=default_policy, resource=alice)
    compensation.collect_dead_letters()
    letter = DeadLetter.objects.get()
    order = compensation.open_work_order(title="fuzz", actor="fuzz", flow="demo")
    run, _ = request_runbook_action(work_order=order, runbook="fuzz-book", action="note", input={}, token="fuzz-1",
                                    actor="fuzz")
    bulk = compensation.start_bulk_replay(filter={"flow": "nothing"}, actor="fuzz")
    ids = {"tasks": [dead.pk, waiting.pk], "dead-letters": [letter.pk], "bulk-replays": [bulk.pk],
           "workorders": [order.pk, letter.work_order_id], "runbook-runs": [run.pk],
           "resources": [alice.pk, bob.pk, quarantined.pk]}
    return {"key": key, "ids": ids, "keys": ["alice@x", "bob@x", "carol@x"]}


def aim(case, known) -> None:
    """Point most generated paths at rows that exist (a random id names none): an id, pool or key
    the generator made is replaced, chosen by the generated value, unless it ends in 7 (left as
    made, for the 404s)."""
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


@schema.parametrize()
@hypothesis_settings(deadline=None, suppress_health_check=list(HealthCheck))
def test_no_answer_is_a_server_error_and_every_answer_conforms_to_the_schema(case, known):
    aim(case, known)
    case.call_and_validate(headers={"Authorization": f"Bearer {known['key']}"}, checks=CHECKS)


def test_the_schema_fuzzed_is_the_one_the_api_serves(client):
    assert served_schema() == client.get("/api/schema/?format=json").json()
