"""What the schemathesis run (tests/test_api_fuzz.py) found in the plumbing, held here so that a
quick run catches it again: OPTIONS on an action endpoint, and choice columns that may be empty."""

import pytest
from django.test import Client

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("path, field", [("/api/tasks/1/cancel", "reason"), ("/api/resources/1/claim", "holder"),
                                         ("/api/internal/tasks/retry", "tasks")])
def test_options_on_an_action_endpoint_describes_what_it_takes_instead_of_failing(api, path, field):
    response = api.options(path)
    assert response.status_code == 200, response.content
    assert field in response.json()["actions"]["POST"]


def test_a_read_only_choice_column_that_may_be_empty_documents_the_empty_choice():
    schema = Client().get("/api/schema/?format=json").json()
    lease_kind = schema["components"]["schemas"]["Resource"]["properties"]["lease_kind"]
    assert {"$ref": "#/components/schemas/BlankEnum"} in lease_kind["oneOf"]
    state = schema["components"]["schemas"]["Task"]["properties"]["state"]
    assert "oneOf" not in state  # never empty: no blank choice


@pytest.mark.parametrize("idempotency_key", [None, "big-body-1"])
def test_a_body_past_the_upload_limit_is_refused_as_too_large_not_a_server_error(api, pool, settings, idempotency_key):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    headers = {"HTTP_IDEMPOTENCY_KEY": idempotency_key} if idempotency_key else {}
    body = {"pool": pool.name, "key": "big", "attributes": {"note": "x" * 2000}}
    response = api.post("/api/resources/", body, format="json", **headers)
    assert response.status_code == 413, response.content
    assert response.json()["error"]["code"] == "request_too_large"
