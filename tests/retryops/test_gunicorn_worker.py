"""The requests gunicorn refuses itself, before Django sees them (a request line or header fields
past its limits), answered by deploy/'s gunicorn in the API's JSON error shape."""

import httpx
import pytest

from retryops.gunicorn_worker import HEADER_FIELD_BYTES, HEADER_FIELDS, REQUEST_LINE_BYTES
from tests.http_server import gunicorn

pytestmark = [pytest.mark.slow, pytest.mark.django_db]


@pytest.fixture(scope="module")
def server(django_db_setup, django_db_blocker):
    with django_db_blocker.unblock(), gunicorn(workers=1, threads=2) as base:
        yield base


def refusal_of(response: httpx.Response, status: int) -> dict:
    assert response.status_code == status, response.text
    assert response.headers["Content-Type"] == "application/json"
    assert response.headers["X-Request-ID"]
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message", "details"}, body
    return body["error"]


def test_a_request_line_past_the_limit_answers_414_in_the_apis_error_shape(server):
    response = httpx.get(f"{server}/api/resources/", params={"key": "k" * REQUEST_LINE_BYTES}, timeout=30)
    error = refusal_of(response, 414)
    assert error["code"] == "request_line_too_long" and error["details"] == {"limit_bytes": REQUEST_LINE_BYTES}


def test_too_many_header_fields_answer_431_in_the_apis_error_shape(server):
    headers = {f"X-Extra-{n}": "1" for n in range(HEADER_FIELDS + 1)}
    error = refusal_of(httpx.get(f"{server}/api/resources/", headers=headers, timeout=30), 431)
    assert error["code"] == "header_fields_too_large"
    assert error["details"] == {"limit_fields": HEADER_FIELDS, "limit_field_bytes": HEADER_FIELD_BYTES}


def test_a_header_field_past_the_limit_answers_431_in_the_apis_error_shape(server):
    response = httpx.get(f"{server}/api/resources/", headers={"X-Note": "n" * HEADER_FIELD_BYTES}, timeout=30)
    assert refusal_of(response, 431)["code"] == "header_fields_too_large"


def test_a_request_within_the_limits_reaches_the_app(server):
    response = httpx.get(f"{server}/api/resources/", params={"key": "k" * 3000},
                         headers={"X-Note": "n" * 4000}, timeout=30)
    assert response.status_code == 401 and response.json()["error"]["code"] == "not_authenticated"
