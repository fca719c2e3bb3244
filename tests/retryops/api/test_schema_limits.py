"""The limits the server enforces, as the schema states them: what the schemathesis run against the
deployed server (tests/test_api_fuzz.py) found refused although the schema called it valid, or
read off the services, each held here so that a quick run catches it again: the schema calls a
request invalid exactly where the server refuses it."""

import re
import uuid

import pytest
from django.conf import settings
from django.test import Client
from jsonschema import Draft202012Validator

from audit.services import idempotency_key
from compensation.runbooks.catalog import is_token
from retryops import roles
from retryops.api.pagination import CursorPage
from retryops.errors import BadInput
from retryops.inputs import MAX_ID
from retryops.jsonsafe import MAX_SAFE_INTEGER
from tests.api_fixtures import keyed_client

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def schema(django_db_blocker):
    with django_db_blocker.unblock():
        return Client().get("/api/schema/?format=json").json()


def valid(schema: dict, component: str, body) -> bool:
    """Whether `body` is valid for the schema's component `component` (its $refs resolved)."""
    root = {"$ref": f"#/components/schemas/{component}", "components": schema["components"]}
    return Draft202012Validator(root).is_valid(body)


def parameter(schema: dict, path: str, method: str, name: str) -> dict:
    [found] = [p for p in schema["paths"][path][method]["parameters"] if p["name"] == name]
    return found["schema"]


def test_every_page_size_is_documented_from_1_to_the_largest_page(schema):
    lists = [(path, method) for path, methods in schema["paths"].items() for method, operation in methods.items()
             if any(p["name"] == "page_size" for p in operation.get("parameters", []))]
    assert ("/api/resources/{id}/retry_history/", "get") in lists and ("/api/tasks/", "get") in lists
    for path, method in lists:
        assert parameter(schema, path, method, "page_size") == {
            "type": "integer", "minimum": 1, "maximum": CursorPage.max_page_size}, path


@pytest.mark.parametrize("path", ["/api/dead-letters/", "/api/tasks/"])
def test_an_id_filter_is_documented_as_a_whole_number_from_1_to_bigints_largest(schema, path):
    assert parameter(schema, path, "get", "resource") == {"type": "integer", "minimum": 1, "maximum": MAX_ID}


def test_a_filter_is_documented_without_a_nul_and_the_server_refuses_one(schema, api):
    flow = parameter(schema, "/api/tasks/", "get", "flow")
    assert not re.search(flow["pattern"], "a\x00b") and re.search(flow["pattern"], "demo")
    assert api.get("/api/tasks/", {"flow": "a\x00b"}).status_code == 400


KEYS = [str(uuid.uuid4()), "a", "k" * 255, "k" * 256, "", "a b", 'a"b', "é", "a\x7f"]


@pytest.mark.parametrize("key", KEYS)
def test_the_idempotency_key_is_documented_as_the_server_takes_it(schema, key):
    pattern = parameter(schema, "/api/tasks/", "post", "Idempotency-Key")["pattern"]
    try:
        idempotency_key(key)
        taken = True
    except BadInput:
        taken = False
    assert bool(re.search(pattern, key)) == taken


@pytest.mark.parametrize("body, ok", [({"task": 1}, True), ({"tasks": [1, 2]}, True), ({}, False),
                                      ({"task": 1, "tasks": [2]}, False), ({"tasks": [1, 1]}, False)])
def test_a_task_retry_is_documented_as_one_task_or_a_list_of_each_once(schema, api, body, ok):
    operation = schema["paths"]["/api/internal/tasks/retry/"]["post"]
    assert operation["requestBody"]["required"] is True
    assert valid(schema, "TaskRetryRequestRequest", body) is ok
    assert (api.post("/api/internal/tasks/retry/", body, format="json").status_code != 400) is ok


UNSTORABLE = [None, [], {"n": MAX_SAFE_INTEGER + 1}, {"n": -MAX_SAFE_INTEGER - 1}, {"a\x00": 1}, {"s": "a\x00"},
              {"l": [{"s": "\x00"}]}]


@pytest.mark.parametrize("attributes", UNSTORABLE)
def test_a_json_object_jsonb_cannot_keep_as_sent_is_invalid_in_the_schema_and_refused(schema, api, pool, attributes):
    body = {"pool": pool.name, "key": "k1", "attributes": attributes}
    assert not valid(schema, "ResourceCreateRequest", body)
    assert api.post("/api/resources/", body, format="json").status_code == 400


def test_a_json_object_of_any_storable_values_is_valid_and_taken(schema, api, pool):
    attributes = {"n": MAX_SAFE_INTEGER, "m": -MAX_SAFE_INTEGER, "f": 0.5, "t": "ok", "b": False, "z": None,
                  "l": [1, "x", {"deep": [0.5]}]}
    body = {"pool": pool.name, "key": "k1", "attributes": attributes}
    assert valid(schema, "ResourceCreateRequest", body)
    assert api.post("/api/resources/", body, format="json").status_code == 201


@pytest.mark.parametrize("holder, ok", [("worker-1", True), ("\ufeff", True), (" \x1d\u3000", False), ("\x1d", False),
                                        ("", False), ("w\x00", False)])
def test_text_that_may_not_be_blank_is_documented_with_every_character_the_field_trims(schema, api, alice,
                                                                                        holder, ok):
    assert valid(schema, "ClaimRequest", {"holder": holder}) is ok
    assert (api.post(f"/api/resources/{alice.pk}/claim", {"holder": holder}, format="json").status_code == 200) is ok


@pytest.mark.parametrize("component, field", [("ClaimRequest", "lease_seconds"), ("ClaimNextRequest", "lease_seconds"),
                                              ("PoolCreateRequest", "lease_seconds"), ("HeartbeatRequest", "seconds")])
def test_a_lease_is_documented_as_long_as_the_services_let_it_be(schema, component, field):
    assert schema["components"]["schemas"][component]["properties"][field]["maximum"] == \
        settings.RETRYOPS_MAX_LEASE_SECONDS


@pytest.mark.parametrize("name, ok", [("billing-eu_2", True), ("a b", False), ("é", False), ("a.b", False)])
def test_a_pool_name_is_documented_as_the_letters_digits_hyphens_and_underscores_it_may_have(schema, api, name, ok):
    assert valid(schema, "PoolCreateRequest", {"name": name}) is ok
    assert (api.post("/api/pools/", {"name": name}, format="json").status_code == 201) is ok


@pytest.mark.parametrize("token", ["run-1", "a:b@c/d+e=f.g_h", "a b", "é", "t" * 101])
def test_a_runbook_token_is_documented_as_the_service_takes_it(schema, token):
    assert valid(schema, "RunbookRequestRequest", {"runbook": "r", "action": "a", "token": token}) == is_token(token)


@pytest.mark.parametrize("body, ok", [({}, True), ({"filter": {}}, True), ({"dry_run": False, "all": True}, True),
                                      ({"dry_run": False, "filter": {"flow": "demo"}}, True),
                                      ({"dry_run": False, "filter": {"resource": 1}}, True),
                                      ({"dry_run": False}, False), ({"dry_run": False, "filter": {"flow": " "}}, False),
                                      ({"dry_run": False, "filter": {"flow": "", "pool": ""}}, False)])
def test_a_bulk_replay_of_everything_is_documented_as_needing_all_unless_a_dry_run(schema, make_api_client, body,
                                                                                    ok):
    operator = keyed_client(make_api_client("oncall", *roles.ROLES[roles.OPERATORS])[1])
    assert valid(schema, "BulkReplayRequestRequest", body) is ok
    assert (operator.post("/api/dead-letters/replay/", body, format="json").status_code != 400) is ok


def test_a_bulk_replays_times_are_documented_as_date_times_or_empty(schema):
    died_after = schema["components"]["schemas"]["BulkFilterRequest"]["properties"]["died_after"]
    assert died_after["anyOf"] == [{"format": "date-time"}, {"maxLength": 0}]


def test_a_work_order_patch_documents_its_409(schema):
    assert "409" in schema["paths"]["/api/ops/workorders/{id}/"]["patch"]["responses"]


def test_more_query_parameters_than_the_server_reads_answer_400_as_the_schema_says(schema, api, settings):
    limit = settings.DATA_UPLOAD_MAX_NUMBER_FIELDS
    response = api.get("/api/tasks/?" + "&".join(f"p{n}=1" for n in range(limit + 1)))
    assert response.status_code == 400, response.content
    assert response.json()["error"] == {
        "code": "too_many_parameters", "details": {"limit": limit},
        "message": f"the request has more than the {limit} query parameters the server reads"}
    assert f"more than {limit} query parameters" in schema["paths"]["/api/tasks/"]["get"]["responses"]["400"][
        "description"]


@pytest.mark.parametrize("body, ok", [({"outcome": "failure", "error": "TimeoutError: late"}, True),
                                      ({"outcome": "success"}, True), ({"outcome": "failure"}, False),
                                      ({"outcome": "failure", "error": " "}, False)])
def test_a_failure_is_documented_as_needing_its_error(schema, api, claimed_alice, body, ok):
    body = {"lease_token": str(uuid.uuid4()), **body}  # a token of the right form that holds nothing: 409
    assert valid(schema, "ReleaseRequest", body) is ok
    assert (api.post(f"/api/resources/{claimed_alice.pk}/release", body, format="json").status_code != 400) is ok
