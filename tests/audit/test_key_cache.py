"""The API's cache of authenticated keys (audit.keycache): most requests are authenticated without
a query, and a revoked key stops working at once in the process that revoked it and within a
second in every other."""

import time

import httpx
import pytest

from audit import keycache
from audit.selectors import KeyCheck, cached_api_client_for_key
from audit.services import hash_key, revoke_api_client
from tests.api_fixtures import VIEW, grant
from tests.http_server import gunicorn

pytestmark = pytest.mark.django_db


@pytest.fixture
def reports(make_api_client):
    return make_api_client("reports", *VIEW)


def test_a_key_read_a_moment_ago_is_authenticated_without_a_query(reports, keys_kept, django_assert_num_queries):
    client, key = reports
    assert cached_api_client_for_key(key).client == client
    with django_assert_num_queries(0):
        assert cached_api_client_for_key(key).client == client


def test_a_key_revoked_in_this_process_is_refused_at_its_next_use(reports):
    client, key = reports
    assert cached_api_client_for_key(key).client == client
    revoke_api_client(client=client, actor="carol")
    check = cached_api_client_for_key(key)
    assert check.client is None and "revoked" in check.problem


def test_a_permission_granted_in_this_process_counts_at_the_next_use(reports):
    client, key = reports
    assert not cached_api_client_for_key(key).client.user.has_perm("resources.claim_resource")
    grant(client.user, "resources.claim_resource")
    assert cached_api_client_for_key(key).client.user.has_perm("resources.claim_resource")


def test_a_permission_removed_in_this_process_is_refused_once_committed_though_a_request_read_it_before(
        reports, django_capture_on_commit_callbacks):
    client, key = reports
    with django_capture_on_commit_callbacks(execute=True):
        client.user.user_permissions.clear()
        # Another thread of the process authenticates the key between the change and its commit:
        # it still reads the permission, and keeps what it read.
        keycache.put(hash_key(key), KeyCheck(client=_with_permissions(client, VIEW)), time.monotonic())
    assert not cached_api_client_for_key(key).client.user.has_perm(VIEW[0])


def _with_permissions(client, codenames):
    client.user._perm_cache = set(codenames)
    return client


def test_an_unknown_key_is_never_kept(reports):
    _, key = reports
    forged = key[:-4] + ("AAAA" if not key.endswith("AAAA") else "BBBB")
    keycache.forget()
    assert cached_api_client_for_key(forged).client is None
    assert keycache._entries == {}


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_key_revoked_in_another_process_is_refused_by_the_server_a_second_later(reports):
    client, key = reports
    headers = {"Authorization": f"Bearer {key}"}
    with gunicorn(workers=1, threads=2) as base, httpx.Client(base_url=base, headers=headers, timeout=30) as http:
        # The server's process has read the client (and keeps it) before the revocation.
        assert http.get("/api/resources/").status_code == 200
        assert http.get("/api/resources/").status_code == 200
        revoke_api_client(client=client, actor="carol")
        time.sleep(1.0)
        refused = http.get("/api/resources/")
    assert refused.status_code == 401, refused.text
    assert "revoked" in refused.json()["error"]["message"]
