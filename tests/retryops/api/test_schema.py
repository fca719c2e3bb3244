"""The OpenAPI 3.1 schema, its docs page from vendored assets: open to all.

The schema's rules are checked here on the probe endpoint's urls and on the project's own
(`ROOT_URLCONFS`), so that every endpoint any app adds is held to them."""

import re

import pytest
from django.test import Client, override_settings

pytestmark = pytest.mark.django_db

ERROR_REF = "#/components/schemas/Error"
ROOT_URLCONFS = ["tests.retryops.api.urls", "retryops.urls"]


def schema_of(urlconf: str, django_db_blocker) -> dict:
    with django_db_blocker.unblock(), override_settings(ROOT_URLCONF=urlconf):
        response = Client().get("/api/schema/?format=json")
    assert response.status_code == 200, response.content
    return response.json()


@pytest.fixture(scope="module", params=ROOT_URLCONFS)
def schema(request, django_db_blocker):
    return schema_of(request.param, django_db_blocker)


@pytest.fixture(scope="module")
def probe_schema(django_db_blocker):
    return schema_of(ROOT_URLCONFS[0], django_db_blocker)


def operations(schema):
    for path, methods in schema["paths"].items():
        for method, operation in methods.items():
            if method in ("get", "post", "put", "patch", "delete"):
                yield path, method, operation


def test_the_schema_is_openapi_3_1_and_open_without_a_key(schema):
    assert schema["openapi"] == "3.1.0"


def test_every_error_answer_of_every_operation_is_the_one_error_shape(schema):
    for path, method, operation in operations(schema):
        for status, response in operation["responses"].items():
            if int(status) >= 400:
                assert response["content"]["application/json"]["schema"] == {"$ref": ERROR_REF}, (path, method, status)


def test_every_operation_that_needs_a_key_documents_401_403_and_429(schema):
    for path, method, operation in operations(schema):
        assert {"401", "403", "429"} <= set(operation["responses"]), (path, method)


def test_every_post_takes_an_idempotency_key_and_documents_its_409_and_422(schema):
    for path, method, operation in operations(schema):
        if method == "post":
            headers = {p["name"] for p in operation.get("parameters", []) if p["in"] == "header"}
            assert "Idempotency-Key" in headers and {"409", "422"} <= set(operation["responses"]), path


def test_every_request_body_says_that_fields_it_does_not_name_are_refused(schema):
    open_bodies = []
    for path, method, operation in operations(schema):
        for content in operation.get("requestBody", {}).get("content", {}).values():
            body = content["schema"]
            if "$ref" in body:
                body = schema["components"]["schemas"][body["$ref"].rsplit("/", 1)[1]]
            if body.get("additionalProperties") is not False:
                open_bodies.append(f"{method.upper()} {path}")
    assert open_bodies == []


def test_every_operation_documents_the_web_servers_414_and_431(schema):
    for path, method, operation in operations(schema):
        assert {"414", "431"} <= set(operation["responses"]), (path, method)


def test_every_operation_that_takes_a_body_documents_411(schema):
    for path, method, operation in operations(schema):
        if method in ("post", "patch"):
            assert "411" in operation["responses"], (path, method)


def test_the_413_and_429_state_the_body_size_and_the_rates_the_server_keeps(schema, settings):
    responses = next(operation["responses"] for _path, method, operation in operations(schema) if method == "post")
    assert f"{settings.DATA_UPLOAD_MAX_MEMORY_SIZE} bytes" in responses["413"]["description"]
    assert all(rate in responses["429"]["description"] for rate in (
        settings.RETRYOPS_API_READ_RATE, settings.RETRYOPS_API_WRITE_RATE, settings.RETRYOPS_API_ANON_RATE))


def test_the_error_shape_names_code_message_and_details(probe_schema):
    detail = probe_schema["components"]["schemas"]["ErrorDetail"]
    assert set(detail["required"]) == {"code", "message", "details"}
    assert detail["properties"]["details"]["type"] == "object"


def test_the_api_key_is_documented_in_either_header(probe_schema):
    schemes = probe_schema["components"]["securitySchemes"]
    assert schemes["ApiKeyBearer"] == {**schemes["ApiKeyBearer"], "type": "http", "scheme": "bearer"}
    assert (schemes["ApiKeyHeader"]["in"], schemes["ApiKeyHeader"]["name"]) == ("header", "X-API-Key")


def test_the_docs_page_loads_its_assets_from_this_server_not_a_cdn(client):
    response = client.get("/api/docs/")
    assert response.status_code == 200
    html = response.content.decode()
    assets = re.findall(r'(?:src|href)="([^"]+)"', html)
    assert any("drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js" in a for a in assets), assets
    assert not [a for a in assets if a.startswith(("http:", "https:", "//"))], assets


def test_the_redoc_page_loads_nothing_from_another_server(client):
    response = client.get("/api/redoc/")
    assert response.status_code == 200
    html = response.content.decode()
    assert "drf_spectacular_sidecar/redoc/bundles/redoc.standalone.js" in html
    assert not re.findall(r"(?:https?:)?//[a-z0-9.-]+\.[a-z]{2,}", html)


def test_the_vendored_swagger_ui_is_served(client):
    response = client.get("/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js")
    assert response.status_code == 200


def test_every_endpoint_but_the_open_ones_refuses_a_request_without_a_key(client, django_db_blocker):
    schema = schema_of("retryops.urls", django_db_blocker)
    sample = {"{id}": "1", "{pool}": "accounts", "{key}": "alice@x"}
    for path, method, operation in operations(schema):
        for name, value in sample.items():
            path = path.replace(name, value)
        response = getattr(client, method)(path, {}, content_type="application/json")
        assert response.status_code == 401, (method, path, response.status_code)
