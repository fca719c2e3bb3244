"""AuditContextMiddleware: each request's entries name its user, its channel and its request id."""

import base64
import uuid

import pytest

from audit.models import AuditEntry
from audit.services import record_audit


@pytest.fixture(autouse=True)
def probe_urls(settings):
    settings.ROOT_URLCONF = "tests.audit.urls"


@pytest.fixture
def carol(django_user_model):
    return django_user_model.objects.create_user(username="carol", password="s3cret-pass")


def entry_of(response) -> AuditEntry:
    assert response.status_code == 200, response.content
    return AuditEntry.objects.get(pk=response.json()["entry"])


def test_an_admin_page_records_its_logged_in_user_on_the_admin_channel(client, carol, alice):
    client.force_login(carol)
    entry = entry_of(client.post(f"/admin/reset/{alice.pk}/"))
    assert (entry.actor, entry.channel) == ("carol", "admin")


def test_any_other_page_than_the_api_is_the_admin_channel(client, carol, alice):
    client.force_login(carol)
    assert entry_of(client.post(f"/console/reset/{alice.pk}/")).channel == "admin"


def test_an_api_call_records_the_user_the_api_authenticated_on_the_api_channel(client, carol, alice):
    basic = base64.b64encode(b"carol:s3cret-pass").decode()
    entry = entry_of(client.post(f"/api/resources/{alice.pk}/reset/", HTTP_AUTHORIZATION=f"Basic {basic}"))
    assert (entry.actor, entry.channel) == ("carol", "api")


def test_an_anonymous_request_is_recorded_as_anonymous(client, alice):
    assert entry_of(client.post(f"/console/reset/{alice.pk}/")).actor == "anonymous"


def test_the_request_id_a_client_sends_is_recorded_and_answered(client, alice):
    response = client.post(f"/admin/reset/{alice.pk}/", HTTP_X_REQUEST_ID="edge-7f3a.42")
    assert entry_of(response).request_id == "edge-7f3a.42"
    assert response["X-Request-ID"] == "edge-7f3a.42"


def test_without_a_request_id_the_request_gets_a_new_one_and_answers_with_it(client, alice):
    response = client.post(f"/admin/reset/{alice.pk}/")
    entry = entry_of(response)
    assert uuid.UUID(entry.request_id)
    assert response["X-Request-ID"] == entry.request_id


def test_two_requests_get_different_request_ids(client, alice):
    first = entry_of(client.post(f"/admin/reset/{alice.pk}/"))
    second = entry_of(client.post(f"/admin/reset/{alice.pk}/"))
    assert first.request_id != second.request_id


@pytest.mark.parametrize("sent", ["has spaces in it", "x" * 101, "tab\there", "nul\x00"])
def test_an_unusable_request_id_is_replaced_not_stored(client, alice, sent):
    response = client.post(f"/admin/reset/{alice.pk}/", HTTP_X_REQUEST_ID=sent)
    entry = entry_of(response)
    assert entry.request_id != sent and uuid.UUID(entry.request_id)
    assert response["X-Request-ID"] == entry.request_id


def test_a_page_without_audit_entries_still_answers_with_its_request_id(client):
    response = client.get("/nowhere/", HTTP_X_REQUEST_ID="abc-123")
    assert response.status_code == 404
    assert response["X-Request-ID"] == "abc-123"


def test_the_request_context_ends_with_the_request(client, carol, alice):
    client.force_login(carol)
    client.post(f"/admin/reset/{alice.pk}/")
    assert record_audit(action="resource.reset", target=alice).actor == "system"
