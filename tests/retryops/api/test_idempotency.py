"""Idempotency-Key (draft-ietf-httpapi-idempotency-key-header) on the probe endpoint's POST."""

from datetime import timedelta

import pytest
from django.utils import timezone

from audit.models import AuditEntry, IdempotencyKey
from audit.services import begin_idempotent_request, prune_idempotency_keys
from tests.api_fixtures import keyed_client

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def probe_urls(settings):
    settings.ROOT_URLCONF = "tests.retryops.api.urls"


@pytest.fixture
def billing(make_api_client):
    return make_api_client("billing", "resources.change_resource")


@pytest.fixture
def api(billing):
    return keyed_client(billing[1])


def post(api, body, key="k-1", **headers):
    return api.post("/api/probe/", body, format="json", HTTP_IDEMPOTENCY_KEY=key, **headers)


def test_a_repeat_answers_the_first_answer_and_does_nothing_new(api):
    first = post(api, {"name": "a"})
    again = post(api, {"name": "a"})
    assert (again.status_code, again.json(), again["Location"]) == (201, first.json(), first["Location"])
    assert again["Idempotent-Replayed"] == "true" and "Idempotent-Replayed" not in first
    assert AuditEntry.objects.filter(target_type="probe").count() == 1


def test_the_draft_quoted_form_of_a_key_is_the_same_key(api):
    post(api, {"name": "a"}, key="k-9")
    assert post(api, {"name": "a"}, key='"k-9"')["Idempotent-Replayed"] == "true"


def test_a_refusal_is_the_answer_a_repeat_gets_too(api):
    first = post(api, {"name": "refuse"})
    again = post(api, {"name": "refuse"})
    assert (first.status_code, again.status_code, again.json()) == (409, 409, first.json())
    assert again["Idempotent-Replayed"] == "true"


def test_the_same_key_with_another_body_is_refused_with_422(api):
    post(api, {"name": "a"})
    response = post(api, {"name": "b"})
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "idempotency_key_reused"
    assert AuditEntry.objects.filter(target_type="probe").count() == 1


def test_the_same_key_on_another_path_is_refused_with_422(api):
    post(api, {"name": "a"})
    assert api.post("/api/probe/?x=1", {"name": "a"}, format="json", HTTP_IDEMPOTENCY_KEY="k-1").status_code == 422


def test_a_repeat_while_the_first_is_processed_is_refused_with_409(api, billing):
    begin_idempotent_request(key="k-1", method="POST", path="/api/probe", body=b'{"name":"a"}', client=billing[0])
    response = post(api, {"name": "a"})
    assert response.status_code == 409
    error = response.json()["error"]
    assert (error["code"], error["details"]["stale"]) == ("idempotency_key_in_progress", False)
    assert not AuditEntry.objects.filter(target_type="probe").exists()


def test_a_first_request_cut_off_long_ago_is_reported_as_stale_not_run_again(api, billing):
    record, _ = begin_idempotent_request(key="k-1", method="POST", path="/api/probe", body=b'{"name":"a"}',
                                         client=billing[0])
    IdempotencyKey.objects.filter(pk=record.pk).update(created_at=timezone.now() - timedelta(minutes=10))
    error = post(api, {"name": "a"}).json()["error"]
    assert (error["code"], error["details"]["stale"]) == ("idempotency_key_in_progress", True)
    assert not AuditEntry.objects.filter(target_type="probe").exists()


def test_a_server_error_releases_the_key_for_another_try(api):
    assert post(api, {"name": "boom"}).status_code == 500
    assert not IdempotencyKey.objects.exists()
    assert "Idempotent-Replayed" not in post(api, {"name": "boom"})


def test_keys_belong_to_their_client(api, make_api_client):
    _, other_key = make_api_client("shipping", "resources.change_resource")
    post(api, {"name": "a"})
    other = post(keyed_client(other_key), {"name": "a"})
    assert other.status_code == 201 and "Idempotent-Replayed" not in other
    assert AuditEntry.objects.filter(target_type="probe").count() == 2


def test_a_post_without_a_key_is_processed_each_time(api):
    api.post("/api/probe/", {"name": "a"}, format="json")
    api.post("/api/probe/", {"name": "a"}, format="json")
    assert AuditEntry.objects.filter(target_type="probe").count() == 2
    assert not IdempotencyKey.objects.exists()


@pytest.mark.parametrize("key", ["", "two words", "é", "x" * 256])
def test_a_key_that_is_not_a_short_visible_token_is_bad_input(api, key):
    error = post(api, {"name": "a"}, key=key).json()["error"]
    assert (error["code"], error["details"]["field"]) == ("bad_input", "Idempotency-Key")


def test_a_refused_request_stores_no_key(make_api_client):
    _, key = make_api_client("reports", "resources.view_resource")
    assert post(keyed_client(key), {"name": "a"}).status_code == 403
    assert not IdempotencyKey.objects.exists()


def test_a_session_users_keys_are_their_own(client, django_user_model):
    from tests.api_fixtures import grant

    carol = django_user_model.objects.create_user(username="carol")
    grant(carol, "resources.change_resource")
    client.force_login(carol)
    first = client.post("/api/probe/", {"name": "a"}, content_type="application/json", HTTP_IDEMPOTENCY_KEY="k-1")
    again = client.post("/api/probe/", {"name": "a"}, content_type="application/json", HTTP_IDEMPOTENCY_KEY="k-1")
    assert (first.status_code, again["Idempotent-Replayed"]) == (201, "true")
    assert IdempotencyKey.objects.get().user == carol


def test_the_prune_deletes_keys_past_the_keeping_time_only(api, settings):
    post(api, {"name": "a"}, key="old")
    post(api, {"name": "b"}, key="new")
    IdempotencyKey.objects.filter(key="old").update(created_at=timezone.now() - timedelta(hours=25))
    assert prune_idempotency_keys() == 1
    assert list(IdempotencyKey.objects.values_list("key", flat=True)) == ["new"]


@pytest.mark.django_db(transaction=True)
def test_the_first_requests_key_is_committed_before_its_work_so_a_concurrent_repeat_sees_it(billing):
    import threading

    from django.db import connection

    from tests.retryops.api import urls

    urls.proceed.clear()
    first = {}

    def send_first():
        try:
            first["response"] = post(keyed_client(billing[1]), {"name": "wait"})
        finally:
            connection.close()  # this thread's own connection

    worker = threading.Thread(target=send_first)
    worker.start()
    try:
        assert urls.waiting.wait(10)
        during = post(keyed_client(billing[1]), {"name": "wait"})
    finally:
        urls.proceed.set()
        worker.join(10)
    assert (during.status_code, during.json()["error"]["code"]) == (409, "idempotency_key_in_progress")
    assert first["response"].status_code == 201
    assert post(keyed_client(billing[1]), {"name": "wait"})["Idempotent-Replayed"] == "true"
