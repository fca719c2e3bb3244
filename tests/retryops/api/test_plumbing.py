"""The API's plumbing through a probe endpoint: the error shape, authentication, permissions,
the audit context and the request id."""

from datetime import timedelta

import pytest
from django.utils import timezone

from audit import keycache
from audit.models import ApiClient, AuditEntry
from audit.services import revoke_api_client
from retryops.api.errors import STATUS_BY_CODE, status_for
from tests.api_fixtures import keyed_client

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def probe_urls(settings):
    settings.ROOT_URLCONF = "tests.retryops.api.urls"


@pytest.fixture
def writer(make_api_client):
    """billing, which may change resources (the probe's POST) and read them."""
    return make_api_client("billing", "resources.change_resource", "resources.view_resource")


def error_of(response, status: int) -> dict:
    assert response.status_code == status, response.content
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message", "details"}, body
    return body["error"]


# The error shape


def test_each_domain_code_of_the_table_answers_its_status():
    assert {code: status_for(code) for code in ("resource_unavailable", "pool_exhausted", "lease_mismatch",
                                                 "illegal_transition", "bad_input", "idempotency_key_reused")} == {
        "resource_unavailable": 409, "pool_exhausted": 409, "lease_mismatch": 409, "illegal_transition": 409,
        "bad_input": 400, "idempotency_key_reused": 422}


def test_any_not_found_code_answers_404_and_an_unknown_code_400():
    assert (status_for("resource_not_found"), status_for("pool_not_found"), status_for("made_up")) == (404, 404, 400)
    assert "resource_not_found" not in STATUS_BY_CODE


def test_a_domain_error_answers_its_code_message_and_details(writer):
    error = error_of(keyed_client(writer[1]).post("/api/probe/", {"name": "refuse"}, format="json"), 409)
    assert error == {"code": "resource_unavailable", "message": "account alice@x is in use",
                     "details": {"reason": "in_use"}}


def test_a_bad_body_names_each_bad_field(writer):
    error = error_of(keyed_client(writer[1]).post("/api/probe/", {"name": "x" * 30, "count": 11}, format="json"), 400)
    assert error["code"] == "bad_input"
    assert set(error["details"]["fields"]) == {"name", "count"}


@pytest.mark.parametrize("body", ['{"name": NaN}', '{"name": "a", "count": Infinity}', '{"name": ', '[1, 2',
                                  '{"name": "a", "count": 1' + "0" * 5000 + "}"])
def test_a_body_that_is_not_strict_json_is_bad_input(writer, body):
    response = keyed_client(writer[1]).post("/api/probe/", body, content_type="application/json")
    assert error_of(response, 400)["code"] == "bad_input"


@pytest.mark.parametrize("value", ["a\x00b", "a\ud800", ["a"], {"a": 1}, 1e308, 7, True])
def test_a_value_of_the_wrong_kind_or_unstorable_is_bad_input(writer, value):
    response = keyed_client(writer[1]).post("/api/probe/", {"name": value}, format="json")
    assert error_of(response, 400)["details"]["fields"].keys() == {"name"}


def test_an_unexpected_error_answers_500_in_the_same_shape_with_the_request_id(writer):
    response = keyed_client(writer[1]).post("/api/probe/", {"name": "boom"}, format="json",
                                            HTTP_X_REQUEST_ID="probe-500")
    error = error_of(response, 500)
    assert (error["code"], error["details"]) == ("internal_error", {"request_id": "probe-500"})


def test_an_unknown_api_path_answers_404_in_the_same_shape(writer, settings):
    settings.ROOT_URLCONF = "retryops.urls"
    assert error_of(keyed_client(writer[1]).get("/api/no-such-thing/"), 404)["code"] == "not_found"


# Authentication


def test_a_request_without_a_key_is_refused_with_401_and_a_challenge():
    response = keyed_client(None).get("/api/probe/")
    assert error_of(response, 401)["code"] == "not_authenticated"
    assert response["WWW-Authenticate"].startswith("Bearer")


def test_an_unknown_key_is_refused_with_401(writer):
    forged = writer[1][:-4] + ("AAAA" if not writer[1].endswith("AAAA") else "BBBB")
    assert error_of(keyed_client(forged).get("/api/probe/"), 401)["code"] == "authentication_failed"


def test_a_revoked_key_is_refused_with_401_saying_so(writer):
    revoke_api_client(client=writer[0], actor="test")
    assert "revoked" in error_of(keyed_client(writer[1]).get("/api/probe/"), 401)["message"]


def test_a_key_of_an_inactive_service_user_is_refused(writer):
    writer[0].user.is_active = False
    writer[0].user.save(update_fields=["is_active"])
    assert error_of(keyed_client(writer[1]).get("/api/probe/"), 401)["code"] == "authentication_failed"


def test_the_key_may_come_in_x_api_key(writer):
    assert keyed_client(None).get("/api/probe/", HTTP_X_API_KEY=writer[1]).status_code == 200


def test_only_the_hash_and_the_prefix_of_a_key_are_stored(writer):
    client, key = writer
    row = ApiClient.objects.values().get(pk=client.pk)
    assert key not in {str(value) for value in row.values()}
    assert key.startswith(row["key_prefix"]) and len(row["key_hash"]) == 64


def test_a_client_without_the_permission_is_refused_with_403_naming_it(make_api_client):
    _, key = make_api_client("reports", "resources.view_resource")
    error = error_of(keyed_client(key).post("/api/probe/", {"name": "a"}, format="json"), 403)
    assert "resources.change_resource" in error["message"]


def test_the_last_use_is_written_at_most_once_a_minute(writer):
    client, key = writer
    keyed_client(key).get("/api/probe/")
    first = ApiClient.objects.get(pk=client.pk).last_used_at
    keyed_client(key).get("/api/probe/")
    assert first is not None and ApiClient.objects.get(pk=client.pk).last_used_at == first
    ApiClient.objects.filter(pk=client.pk).update(last_used_at=first - timedelta(minutes=2))
    keycache.forget()  # two minutes later, the process's cached client has long been read again
    keyed_client(key).get("/api/probe/")
    assert ApiClient.objects.get(pk=client.pk).last_used_at > first - timedelta(minutes=1)


def test_a_session_user_may_call_the_api(client, django_user_model):
    from tests.api_fixtures import grant

    carol = django_user_model.objects.create_user(username="carol")
    grant(carol, "resources.view_resource")
    client.force_login(carol)
    assert client.get("/api/probe/").status_code == 200


# Audit and request id


def test_a_change_is_audited_under_the_clients_name_on_the_api_channel_with_the_request_id(writer):
    response = keyed_client(writer[1]).post("/api/probe/", {"name": "a"}, format="json", HTTP_X_REQUEST_ID="ext-42")
    entry = AuditEntry.objects.get(pk=response.json()["entry"])
    assert (entry.actor, entry.channel, entry.request_id) == ("api:billing", "api", "ext-42")
    assert response["X-Request-ID"] == "ext-42"


def test_an_unusable_request_id_is_replaced_by_a_new_one(writer):
    response = keyed_client(writer[1]).post("/api/probe/", {"name": "a"}, format="json",
                                            HTTP_X_REQUEST_ID="two words")
    assert response["X-Request-ID"] != "two words"
    assert AuditEntry.objects.get(pk=response.json()["entry"]).request_id == response["X-Request-ID"]


def test_a_revoked_client_keeps_its_name_in_the_log_and_the_name_may_be_taken_again(writer, make_api_client):
    revoke_api_client(client="billing", actor="test")
    _, key = make_api_client("billing", "resources.change_resource")
    assert keyed_client(key).post("/api/probe/", {"name": "a"}, format="json").status_code == 201
    assert ApiClient.objects.filter(name="billing").count() == 2
    assert timezone.now() >= ApiClient.objects.filter(name="billing").exclude(revoked_at=None).get().revoked_at


def test_a_permission_the_service_user_has_through_a_group_counts(django_user_model):
    from django.contrib.auth.models import Group

    from audit.services import create_api_client
    from retryops import roles

    user = django_user_model.objects.create_user(username="svc-reports")
    user.groups.add(Group.objects.get(name=roles.VIEWERS))
    _, key = create_api_client(name="reports", user=user, actor="test")
    assert keyed_client(key).get("/api/probe/").status_code == 200
    assert keyed_client(key).post("/api/probe/", {"name": "a"}, format="json").status_code == 403
