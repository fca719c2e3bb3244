"""The resource endpoints: pools, resources, claims and the operators' actions, by id and by pool
and key, each with its refusals in the API's error shape."""

import time
import uuid

import pytest

from audit.models import AuditEntry
from resources import services
from resources.choices import ResourceState
from resources.models import Resource, ResourceEvent, ResourcePool
from tests.api_helpers import error_of, ok, post
from tests.factories import ResourceFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def failed_alice(alice):
    lease = services.claim_by_id(resource_id=alice.pk, holder="task 7")
    return services.release(resource=alice.pk, lease_token=lease.lease_token, outcome="failure",
                            error="TimeoutError: read timed out")


# Pools


def test_a_pool_is_created_and_answered_with_its_location(api):
    body = ok(post(api, "/api/pools/", {"name": "numbers", "resource_noun": "number", "lease_seconds": 60}), 201)
    assert (body["name"], body["lease_seconds"], body["consume_on_success"]) == ("numbers", 60, False)
    response = api.get("/api/pools/numbers/")
    assert ok(response)["resource_noun"] == "number"
    assert AuditEntry.objects.get(action="pool.create").actor == "api:billing"


def test_a_taken_pool_name_is_409_name_taken_naming_the_field(api, pool):
    # The request is well formed (the schema calls it valid); the state refuses it.
    error = error_of(post(api, "/api/pools/", {"name": "accounts"}), 409)
    assert (error["code"], error["details"]["field"], list(error["details"]["fields"])) == (
        "name_taken", "name", ["name"])


def test_pools_are_listed_newest_first_and_filtered_by_name(api, pool):
    services.create_pool(name="numbers", actor="test")
    assert [p["name"] for p in ok(api.get("/api/pools/"))["results"]] == ["numbers", "accounts"]
    assert [p["name"] for p in ok(api.get("/api/pools/?name=accounts"))["results"]] == ["accounts"]


def test_an_unknown_pool_is_404(api, db):
    assert error_of(api.get("/api/pools/nope/"), 404)["code"] == "pool_not_found"


# Resources


def test_a_resource_is_added_to_a_pool_and_answered_with_its_location(api, pool):
    body = ok(post(api, "/api/resources/", {"pool": "accounts", "key": "carol@x", "attributes": {"tier": 2}}), 201)
    created = Resource.objects.get(key="carol@x")
    assert (body["id"], body["pool"], body["state"], body["attributes"]) == (created.pk, "accounts", "available",
                                                                            {"tier": 2})
    assert api.get(f"/api/resources/{created.pk}/").json()["key"] == "carol@x"


def test_adding_to_an_unknown_pool_is_404(api, db):
    assert error_of(post(api, "/api/resources/", {"pool": "nope", "key": "k"}), 404)["code"] == "pool_not_found"


def test_a_taken_key_is_409_key_taken_naming_the_field(api, alice):
    error = error_of(post(api, "/api/resources/", {"pool": "accounts", "key": "alice@x"}), 409)
    assert (error["code"], error["details"]["field"], error["details"]["taken"]) == ("key_taken", "key", ["alice@x"])


@pytest.mark.parametrize(("body", "field"), [
    ('{"key": "a\\u0000b"}', "key"), ('{"key": "a\\ud800b"}', "key"), ('{"key": "%s"}' % ("k" * 201), "key"),
    ('{"key": "k", "label": "%s"}' % ("l" * 201), "label"),
    ('{"key": "k", "attributes": {"n\\ud800": 1}}', "attributes"),
    ('{"key": "k", "attributes": {"deep": %s}}' % ("[" * 700 + "]" * 700), "attributes"),
])
def test_a_resource_no_column_can_hold_is_refused_naming_the_field_and_nothing_is_added(api, pool, body, field):
    response = api.post("/api/resources/", '{"pool": "accounts", ' + body[1:], content_type="application/json")
    assert list(error_of(response, 400)["details"]["fields"]) == [field]
    assert not Resource.objects.exists()


def test_a_flag_sent_as_text_is_refused_naming_it_and_no_pool_is_made(api, db):
    error = error_of(post(api, "/api/pools/", {"name": "coupons", "consume_on_success": "no"}), 400)
    assert list(error["details"]["fields"]) == ["consume_on_success"]
    assert not ResourcePool.objects.filter(name="coupons").exists()


def test_a_resource_is_read_by_id_and_by_pool_and_key_without_its_lease_token(api, claimed_alice):
    by_id = ok(api.get(f"/api/resources/{claimed_alice.pk}/"))
    by_key = ok(api.get("/api/pools/accounts/resources/alice@x/"))
    assert by_id == by_key and by_id["lease_holder"] == "task 812"
    assert "lease_token" not in by_id


@pytest.mark.parametrize("path", ["/api/resources/999999/", "/api/pools/accounts/resources/nobody@x/",
                                  "/api/pools/nope/resources/alice@x/", "/api/resources/1234567890123456789/"])
def test_an_unknown_resource_is_404(api, alice, path):
    assert api.get(path).status_code == 404


def test_resources_are_filtered_by_pool_state_category_key_and_last_failure(api, alice, bob, failed_alice):
    other = ResourceFactory(pool__name="numbers", key="+4470")

    def ids(query):
        return [r["id"] for r in ok(api.get(f"/api/resources/?{query}"))["results"]]

    assert ids("pool=accounts") == [bob.pk, alice.pk]
    assert ids("state=failed") == [alice.pk]
    assert ids("category=retryable") == [alice.pk]
    assert ids("key=%2B4470") == [other.pk]
    assert ids(f"failed_since={failed_alice.last_failure_at.isoformat().replace('+', '%2B')}") == [alice.pk]


@pytest.mark.parametrize("query", ["state=gone", "failed_since=yesterday", "page_size=0", "page_size=501",
                                   "cursor=bz14", "cursor=cD1hYmM%3D", "key=a%00b"])
def test_a_bad_filter_or_cursor_is_bad_input_naming_it(api, alice, query):
    error = error_of(api.get(f"/api/resources/?{query}"), 400)
    assert list(error["details"]["fields"]) == [query.split("=")[0]]


def test_the_list_is_paged_by_cursor(api, pool):
    ResourceFactory.create_batch(5, pool=pool)
    first = ok(api.get("/api/resources/?page_size=2"))
    second = ok(api.get(first["next"]))
    keys = [r["key"] for r in first["results"] + second["results"]]
    assert len(set(keys)) == 4 and second["previous"]


def test_label_and_attributes_are_changed_and_audited(api, alice):
    body = ok(api.patch(f"/api/resources/{alice.pk}/", {"label": "Alice", "attributes": {"tier": 3}}, format="json"))
    assert (body["label"], body["attributes"]) == ("Alice", {"tier": 3})
    assert AuditEntry.objects.get(action="resource.change").after == {"label": "Alice", "attributes": {"tier": 3}}


def patch(api, resource, body, **headers):
    return api.patch(f"/api/resources/{resource.pk}/", body, format="json", **headers)


def test_a_patch_merges_attributes_by_key_and_a_key_set_to_null_is_removed(api, pool):
    carol = ResourceFactory(pool=pool, key="carol@x", attributes={"tier": 2, "region": "eu", "zone": "a",
                                                                 "limits": {"rps": 5, "burst": 10}})
    body = ok(patch(api, carol, {"attributes": {"tier": 3, "region": None, "rack": 7, "limits": {"rps": 9}}}))
    assert body["attributes"] == {"tier": 3, "zone": "a", "rack": 7, "limits": {"rps": 9, "burst": 10}}
    assert Resource.objects.get(pk=carol.pk).attributes == body["attributes"]


def test_a_resource_is_answered_with_an_etag_that_its_patch_moves_on(api, alice):
    read = api.get(f"/api/resources/{alice.pk}/")
    assert read["ETag"].startswith('"') and read["ETag"] == api.get(f"/api/pools/accounts/resources/alice@x/")["ETag"]
    changed = patch(api, alice, {"label": "Alice"}, HTTP_IF_MATCH=read["ETag"])
    assert ok(changed)["label"] == "Alice"
    assert changed["ETag"] not in ("", read["ETag"])
    assert changed["ETag"] == api.get(f"/api/resources/{alice.pk}/")["ETag"]


# Committed as in production: a version is the writing transaction's, and one test transaction
# would be the writer of everything.
@pytest.mark.django_db(transaction=True)
def test_the_etag_moves_on_with_whatever_the_client_sees_change(api, alice):
    etags = [api.get(f"/api/resources/{alice.pk}/")["ETag"]]
    lease = services.claim_by_id(resource_id=alice.pk, holder="w")
    etags.append(api.get(f"/api/resources/{alice.pk}/")["ETag"])
    services.extend_lease(resource=alice.pk, lease_token=lease.lease_token, seconds=600)
    etags.append(api.get(f"/api/resources/{alice.pk}/")["ETag"])
    services.change_pool(pool="accounts", name="logins", actor="ops")
    etags.append(api.get(f"/api/resources/{alice.pk}/")["ETag"])
    assert len(set(etags)) == 4


def test_a_patch_with_a_stale_if_match_is_412_and_writes_nothing(api, alice):
    read = api.get(f"/api/resources/{alice.pk}/")["ETag"]
    ok(patch(api, alice, {"attributes": {"tier": 1}}))  # another system, in between
    error = error_of(patch(api, alice, {"label": "Alice", "attributes": {"tier": 2}}, HTTP_IF_MATCH=read), 412)
    assert (error["code"], f'"{error["details"]["version"]}"') == ("precondition_failed", api.get(
        f"/api/resources/{alice.pk}/")["ETag"])
    row = Resource.objects.get(pk=alice.pk)
    assert (row.label, row.attributes) == (alice.label, {"tier": 1})
    assert AuditEntry.objects.filter(action="resource.change").count() == 1


def test_a_stale_if_match_is_refused_in_the_callers_language(api, alice):
    read = api.get(f"/api/resources/{alice.pk}/")["ETag"]
    ok(patch(api, alice, {"label": "Alice"}))
    error = error_of(patch(api, alice, {"label": "A."}, HTTP_IF_MATCH=read, HTTP_ACCEPT_LANGUAGE="zh-hans"), 412)
    assert error["message"].startswith("account alice@x 在您读取之后已被更改")


def test_the_schema_documents_the_etag_if_match_and_412_of_a_resource(client):
    operations = client.get("/api/schema/?format=json").json()["paths"]["/api/resources/{id}/"]
    read, change = operations["get"], operations["patch"]
    assert "ETag" in read["responses"]["200"]["headers"] and "ETag" in change["responses"]["200"]["headers"]
    assert "If-Match" in {p["name"] for p in change["parameters"] if p["in"] == "header"}
    assert change["responses"]["412"]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/Error"}


@pytest.mark.parametrize("if_match, status", [("*", 200), ('"0.0", {current}', 200), ("W/{current}", 412),
                                              ('"0.0"', 412), ("garbage", 412)])
def test_if_match_takes_a_list_or_any_and_compares_strongly(api, alice, if_match, status):
    current = api.get(f"/api/resources/{alice.pk}/")["ETag"]
    assert patch(api, alice, {"label": "Alice"}, HTTP_IF_MATCH=if_match.format(current=current)).status_code == status


def waiting_for_a_lock() -> int:
    from django.db import connection

    with connection.cursor() as cursor:
        # A transaction reads the activity as it was at its first read, unless told to read it again.
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND "
                       "wait_event_type = 'Lock'")
        return cursor.fetchone()[0]


@pytest.mark.django_db(transaction=True)
def test_two_patches_sent_with_the_same_etag_at_once_write_one_and_refuse_the_other(api, alice):
    import threading

    from django.db import connection, transaction
    from rest_framework.test import APIClient

    etag = api.get(f"/api/resources/{alice.pk}/")["ETag"]
    answers, lock = [], threading.Lock()

    def one(label):
        client = APIClient()
        client.credentials(**api._credentials)
        try:
            status = patch(client, alice, {"label": label}, HTTP_IF_MATCH=etag).status_code
        finally:
            connection.close()
        with lock:
            answers.append(status)

    threads = [threading.Thread(target=one, args=(label,)) for label in ("first", "second")]
    # Both wait on the row's lock, past anything a view could check, until this transaction ends.
    with transaction.atomic():
        Resource.objects.select_for_update().get(pk=alice.pk)
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and waiting_for_a_lock() < 2:
            time.sleep(0.02)
    for thread in threads:
        thread.join(30)
    assert sorted(answers) == [200, 412]
    assert AuditEntry.objects.filter(action="resource.change").count() == 1


def test_a_patch_of_a_service_owned_field_is_refused_naming_it(api, alice):
    error = error_of(api.patch(f"/api/resources/{alice.pk}/", {"label": "x", "state": "available",
                                                               "failure_count": 0, "colour": "red"},
                               format="json"), 400)
    assert set(error["details"]["fields"]) == {"state", "failure_count", "colour"}
    assert "services" in error["details"]["fields"]["state"][0]
    assert Resource.objects.get(pk=alice.pk).label == alice.label


@pytest.mark.parametrize("attributes", ['[1]', '"x"', '{"a": 1e999}', '{"k\\u0000": 1}', '{"k": "\\ud800"}',
                                        '{"n": 1152921504606846976}'])
def test_attributes_that_are_no_storable_json_object_are_bad_input(api, alice, attributes):
    audited = AuditEntry.objects.count()
    response = api.patch(f"/api/resources/{alice.pk}/", f'{{"attributes": {attributes}}}',
                         content_type="application/json")
    assert list(error_of(response, 400)["details"]["fields"]) == ["attributes"]
    assert Resource.objects.get(pk=alice.pk).attributes == alice.attributes
    assert AuditEntry.objects.count() == audited


# Claims


def test_claim_next_leases_a_resource_and_answers_its_token(api, alice):
    lease = ok(post(api, "/api/resources/claim_next", {"pool": "accounts", "holder": "worker-1"}))
    row = Resource.objects.get(pk=alice.pk)
    assert (lease["id"], lease["state"], lease["lease_holder"]) == (alice.pk, "in_use", "worker-1")
    assert lease["lease_token"] == str(row.lease_token)


def test_a_claims_record_is_its_timeline_row_naming_the_client_its_key_and_the_request(api, alice, operator_key):
    response = post(api, "/api/resources/claim_next", {"pool": "accounts", "holder": "worker-1", "details": {"job": 7}},
                    HTTP_X_REQUEST_ID="ext-42")
    event = ResourceEvent.objects.get(resource=alice, kind="claimed")
    assert (event.actor, event.lease_token, event.created_at is not None) == (
        "api:billing", uuid.UUID(ok(response)["lease_token"]), True)
    assert event.details == {"job": 7, "api_request": {"key_prefix": operator_key[:12], "request_id": "ext-42"}}
    assert not AuditEntry.objects.filter(target_type="resources.resource").exists()


def test_a_release_is_recorded_by_its_timeline_row_with_the_key_and_the_request(api, claimed_alice, operator_key):
    ok(post(api, f"/api/resources/{claimed_alice.pk}/release", {"lease_token": str(claimed_alice.lease_token),
                                                                "outcome": "success"}, HTTP_X_REQUEST_ID="ext-43"))
    event = ResourceEvent.objects.get(resource=claimed_alice, kind="released_success")
    assert (event.actor, event.lease_token, event.details["api_request"]) == (
        "api:billing", claimed_alice.lease_token, {"key_prefix": operator_key[:12], "request_id": "ext-43"})
    assert not AuditEntry.objects.filter(target_type="resources.resource").exists()


def test_details_that_name_the_services_own_key_are_bad_input_and_nothing_is_claimed(api, alice):
    error = error_of(post(api, "/api/resources/claim_next",
                          {"pool": "accounts", "holder": "w", "details": {"api_request": "mine"}}), 400)
    assert error["details"]["field"] == "details"
    assert Resource.objects.get(pk=alice.pk).state == ResourceState.AVAILABLE


def test_each_claim_answers_a_higher_fencing_token(api, alice):
    first = ok(post(api, "/api/resources/claim_next", {"pool": "accounts", "holder": "worker-1"}))
    ok(post(api, f"/api/resources/{alice.pk}/release", {"lease_token": first["lease_token"], "outcome": "success"}))
    second = ok(post(api, "/api/resources/claim_next", {"pool": "accounts", "holder": "worker-1"}))
    assert second["fencing_token"] == first["fencing_token"] + 1 == Resource.objects.get(pk=alice.pk).fencing_token


def test_a_typod_lease_field_is_refused_naming_it_and_nothing_is_claimed(api, alice):
    error = error_of(post(api, "/api/resources/claim_next", {"pool": "accounts", "holder": "w", "lease_secs": 5}), 400)
    assert (error["code"], list(error["details"]["fields"])) == ("bad_input", ["lease_secs"])
    assert "lease_seconds" in error["message"]
    assert Resource.objects.get(pk=alice.pk).state == ResourceState.AVAILABLE


def test_a_field_a_request_does_not_take_is_refused_in_the_callers_language(api, alice):
    response = post(api, f"/api/resources/{alice.pk}/quarantine", {"reason": "r", "why": "w"},
                    HTTP_ACCEPT_LANGUAGE="zh-hans")
    assert error_of(response, 400)["details"]["fields"] == {"why": ["不是此请求的字段：它接受 reason"]}


def test_claim_next_of_an_exhausted_pool_is_409_with_its_counts(api, claimed_alice):
    error = error_of(post(api, "/api/resources/claim_next", {"pool": "accounts", "holder": "w"}), 409)
    assert (error["code"], error["details"]["counts"]) == ("pool_exhausted", {"in_use": 1})
    assert not ResourceEvent.objects.filter(kind="claimed").exclude(actor="task 812").exists()


def test_claim_next_of_an_unknown_pool_is_404(api, db):
    assert error_of(post(api, "/api/resources/claim_next", {"pool": "nope", "holder": "w"}), 404)["code"] == \
        "pool_not_found"


def test_a_strict_claim_of_a_resource_in_use_names_the_holder_and_until_when(api, claimed_alice, bob):
    error = error_of(post(api, f"/api/resources/{claimed_alice.pk}/claim", {"holder": "worker-2"}), 409)
    assert error["code"] == "resource_unavailable"
    assert (error["details"]["reason"], error["details"]["holder"]) == ("in_use", "task 812")
    assert error["details"]["until"] == claimed_alice.leased_until.isoformat()
    assert error["message"].startswith("account alice@x is in use by task 812 until ")
    assert Resource.objects.get(pk=bob.pk).state == ResourceState.AVAILABLE


def test_a_strict_claim_of_a_quarantined_resource_says_so(api, alice):
    services.quarantine(resource=alice, actor="ops", reason="banned upstream")
    error = error_of(post(api, "/api/pools/accounts/resources/alice@x/claim", {"holder": "w"}), 409)
    assert (error["details"]["reason"], error["details"]["holder"]) == ("quarantined", None)
    assert "banned upstream" in error["message"]


def test_a_claim_that_is_not_strict_falls_back_to_another_resource_of_the_pool(api, claimed_alice, bob):
    lease = ok(post(api, f"/api/resources/{claimed_alice.pk}/claim", {"holder": "w", "strict": False}))
    assert lease["id"] == bob.pk


def test_a_failed_resource_is_claimed_by_key(api, failed_alice):
    lease = ok(post(api, "/api/pools/accounts/resources/alice@x/claim/", {"holder": "w"}))
    assert (lease["id"], lease["state"]) == (failed_alice.pk, "in_use")


@pytest.mark.parametrize("body", [{"holder": ""}, {"holder": 7}, {"holder": "w", "strict": "no"},
                                  {"holder": "w", "lease_seconds": 0}, {"holder": "w", "lease_seconds": 2**31},
                                  {"holder": "w", "lease_seconds": 1.5}, {"holder": "w", "details": [1]}, {}])
def test_a_bad_claim_body_is_bad_input(api, alice, body):
    assert error_of(post(api, f"/api/resources/{alice.pk}/claim", body), 400)["code"] == "bad_input"


# Release and heartbeat


def test_a_release_with_failure_records_the_error_and_leaves_the_resource_failed(api, claimed_alice):
    body = ok(post(api, f"/api/resources/{claimed_alice.pk}/release",
                   {"lease_token": str(claimed_alice.lease_token), "outcome": "failure",
                    "error": "ConnectionResetError: peer reset"}))
    assert (body["state"], body["failure_count"], body["last_failure_category"]) == ("failed", 1, "retryable")
    event = ResourceEvent.objects.get(resource=claimed_alice, kind="released_failure")
    assert (event.actor, event.reason) == ("api:billing", "ConnectionResetError: peer reset")


def test_a_release_with_success_frees_the_resource(api, claimed_alice):
    body = ok(post(api, f"/api/resources/{claimed_alice.pk}/release",
                   {"lease_token": str(claimed_alice.lease_token), "outcome": "success"}))
    assert (body["state"], body["success_count"]) == ("available", 1)


@pytest.mark.parametrize("token, why", [(None, "never_granted"), ("not-a-uuid", "never_granted")])
def test_a_release_with_a_token_that_does_not_hold_the_resource_is_409_saying_why(api, claimed_alice, token, why):
    error = error_of(post(api, f"/api/resources/{claimed_alice.pk}/release",
                          {"lease_token": token or str(uuid.uuid4()), "outcome": "success"}), 409)
    assert (error["code"], error["details"]["why"]) == ("lease_mismatch", why)


def test_a_release_of_an_unknown_resource_is_404(api, db):
    error = error_of(post(api, "/api/resources/987654321/release", {"lease_token": str(uuid.uuid4()),
                                                                     "outcome": "success"}), 404)
    assert error["code"] == "resource_not_found"


def test_a_release_by_id_is_one_statement_with_its_pool_once_the_key_was_read(api, claimed_alice, keys_kept,
                                                                                django_assert_num_queries):
    ok(post(api, "/api/pools/", {"name": "warm-up"}), 201)  # the key's client is read, and kept a moment
    with django_assert_num_queries(1):
        body = ok(post(api, f"/api/resources/{claimed_alice.pk}/release",
                       {"lease_token": str(claimed_alice.lease_token), "outcome": "success"}))
    assert (body["pool"], body["state"]) == ("accounts", "available")


def test_claim_next_by_the_pools_name_reads_nothing_before_its_claim_once_the_key_and_start_were_read(
        api, alice, bob, keys_kept):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    first = ok(post(api, "/api/resources/claim_next", {"pool": "accounts", "holder": "w"}))
    with CaptureQueriesContext(connection) as captured:
        second = ok(post(api, "/api/resources/claim_next", {"pool": "accounts", "holder": "w"}))
    # The claim's statement (twice when the process's start lay past the one resource left).
    assert {query["sql"].split()[:2] == ["WITH", "pick"] for query in captured.captured_queries} == {True}
    assert {first["id"], second["id"]} == {alice.pk, bob.pk} and second["pool"] == "accounts"


def test_a_second_release_is_409_already_released(api, claimed_alice):
    body = {"lease_token": str(claimed_alice.lease_token), "outcome": "success"}
    post(api, f"/api/resources/{claimed_alice.pk}/release", body)
    assert error_of(post(api, f"/api/resources/{claimed_alice.pk}/release", body), 409)["details"]["why"] == \
        "released"


def test_a_failure_without_its_error_is_bad_input(api, claimed_alice):
    error = error_of(post(api, f"/api/resources/{claimed_alice.pk}/release",
                          {"lease_token": str(claimed_alice.lease_token), "outcome": "failure"}), 400)
    assert error["details"]["field"] == "error"


def test_an_unknown_outcome_is_refused_naming_it_and_the_lease_stays(api, claimed_alice):
    error = error_of(post(api, f"/api/resources/{claimed_alice.pk}/release",
                          {"lease_token": str(claimed_alice.lease_token), "outcome": "maybe"}), 400)
    assert list(error["details"]["fields"]) == ["outcome"]
    assert Resource.objects.get(pk=claimed_alice.pk).state == ResourceState.IN_USE


def test_a_heartbeat_extends_the_lease_and_is_audited(api, claimed_alice):
    body = ok(post(api, f"/api/resources/{claimed_alice.pk}/heartbeat",
                   {"lease_token": str(claimed_alice.lease_token), "seconds": 3600}))
    assert Resource.objects.get(pk=claimed_alice.pk).leased_until.isoformat().replace("+00:00", "Z") == \
        body["leased_until"]
    assert body["leased_until"] > claimed_alice.leased_until.isoformat()
    assert AuditEntry.objects.get(action="resource.heartbeat").actor == "api:billing"


# The operators' actions


def test_reset_makes_a_failed_resource_available_and_keeps_its_history(api, failed_alice):
    body = ok(post(api, f"/api/resources/{failed_alice.pk}/reset", {"reason": "upstream fixed"}))
    assert (body["state"], body["failure_count"]) == ("available", 1)
    assert AuditEntry.objects.get(action="resource.reset").reason == "upstream fixed"


def test_reset_of_an_available_resource_is_409_illegal_transition(api, alice):
    error = error_of(post(api, f"/api/resources/{alice.pk}/reset"), 409)
    assert (error["code"], error["details"]["state"]) == ("illegal_transition", "available")


@pytest.mark.parametrize("reason", ["banned\x00", "banned\udc00"])
def test_a_quarantine_reason_no_column_can_hold_is_refused_naming_it(api, alice, reason):
    assert list(error_of(post(api, f"/api/resources/{alice.pk}/quarantine", {"reason": reason}), 400)
                ["details"]["fields"]) == ["reason"]
    assert Resource.objects.get(pk=alice.pk).state == ResourceState.AVAILABLE


@pytest.mark.parametrize("action", ["quarantine", "reset"])
def test_a_reason_longer_than_the_timeline_keeps_is_refused_naming_it(api, alice, action):
    Resource.objects.filter(pk=alice.pk).update(state=ResourceState.FAILED)
    error = error_of(post(api, f"/api/resources/{alice.pk}/{action}", {"reason": "x" * 2001}), 400)
    assert list(error["details"]["fields"]) == ["reason"]
    assert Resource.objects.get(pk=alice.pk).state == ResourceState.FAILED


def test_a_blank_quarantine_reason_is_refused_in_the_callers_language(api, alice):
    response = post(api, f"/api/resources/{alice.pk}/quarantine", {"reason": "  "}, HTTP_ACCEPT_LANGUAGE="zh-hans")
    assert "不能为空" in error_of(response, 400)["details"]["fields"]["reason"][0]


def test_quarantine_needs_a_reason_and_unquarantine_ends_it(api, alice):
    assert error_of(post(api, f"/api/resources/{alice.pk}/quarantine"), 400)["details"]["fields"].keys() == {"reason"}
    assert ok(post(api, "/api/pools/accounts/resources/alice@x/quarantine", {"reason": "leaked"}))["state"] == \
        "quarantined"
    assert ok(post(api, f"/api/resources/{alice.pk}/unquarantine"))["state"] == "available"
    assert list(AuditEntry.objects.filter(target_type="resources.resource").order_by("id").values_list(
        "action", flat=True)) == ["resource.quarantine", "resource.unquarantine"]


# Permissions


@pytest.mark.parametrize("path, body", [
    ("/api/pools/", {"name": "x"}), ("/api/resources/", {"pool": "accounts", "key": "k"}),
    ("/api/resources/claim_next", {"pool": "accounts", "holder": "w"}), ("/api/resources/{id}/claim", {"holder": "w"}),
    ("/api/resources/{id}/reset", {}), ("/api/resources/{id}/quarantine", {"reason": "r"}),
    ("/api/pools/accounts/resources/alice@x/unquarantine", {}),
])
def test_a_viewer_reads_but_is_refused_every_action_with_403(viewer_api, alice, path, body):
    assert viewer_api.get(f"/api/resources/{alice.pk}/").status_code == 200
    error = error_of(post(viewer_api, path.format(id=alice.pk), body), 403)
    assert error["code"] == "permission_denied"
    assert Resource.objects.get(pk=alice.pk).state == ResourceState.AVAILABLE and ResourcePool.objects.count() == 1


def test_a_request_without_a_key_is_401_on_every_resource_endpoint(client, alice):
    for path in ("/api/pools/", "/api/resources/", f"/api/resources/{alice.pk}/"):
        assert client.get(path).status_code == 401


# Idempotency on a claim


def test_a_claim_repeated_with_its_idempotency_key_answers_the_same_lease_and_claims_nothing_more(api, alice, bob):
    first = post(api, "/api/resources/claim_next", {"pool": "accounts", "holder": "w"}, HTTP_IDEMPOTENCY_KEY="c-1")
    again = post(api, "/api/resources/claim_next", {"pool": "accounts", "holder": "w"}, HTTP_IDEMPOTENCY_KEY="c-1")
    assert again.json() == first.json() and again["Idempotent-Replayed"] == "true"
    assert Resource.objects.filter(state="in_use").count() == 1


@pytest.mark.parametrize("first_path, again_path", [("/api/resources/claim_next", "/api/resources/claim_next/"),
                                                    ("/api/resources/claim_next/", "/api/resources/claim_next")])
def test_a_claim_repeated_with_its_key_with_or_without_the_trailing_slash_is_the_same_request(api, alice, bob,
                                                                                            first_path, again_path):
    first = post(api, first_path, {"pool": "accounts", "holder": "w"}, HTTP_IDEMPOTENCY_KEY="c-1")
    again = post(api, again_path, {"pool": "accounts", "holder": "w"}, HTTP_IDEMPOTENCY_KEY="c-1")
    assert (again.status_code, again.json()) == (200, first.json()) and again["Idempotent-Replayed"] == "true"
    assert Resource.objects.filter(state="in_use").count() == 1


@pytest.mark.parametrize("query", ["failed_since=9999-12-31T23:59:59-12:00", "failed_since=0001-01-01T00:00:00%2B14:00",
                                   "pool=%F0%9F%98%80", "key=" + "k" * 5000, "diagnosis=resource"])
def test_extreme_filter_values_answer_without_a_server_error(api, alice, query):
    assert api.get(f"/api/resources/?{query}").status_code in (200, 400)


@pytest.mark.parametrize("path", ["/api/pools/%00/", "/api/pools/accounts/resources/%00/", "/api/resources/0/",
                                  "/api/pools/accounts/resources/a%00b/claim"])
def test_a_malformed_path_answers_without_a_server_error(api, alice, path):
    response = api.post(path, {"holder": "w"}, format="json") if path.endswith("claim") else api.get(path)
    assert response.status_code in (400, 404), response.content


def test_an_external_system_in_the_operators_group_claims_and_releases(django_user_model, alice):
    from django.contrib.auth.models import Group

    from audit.services import create_api_client
    from retryops import roles
    from tests.api_fixtures import keyed_client

    user = django_user_model.objects.create_user(username="svc-signups")
    user.groups.add(Group.objects.get(name=roles.OPERATORS))
    worker = keyed_client(create_api_client(name="signups", user=user, actor="test")[1])

    lease = ok(post(worker, "/api/resources/claim_next", {"pool": "accounts", "holder": "signup-worker"}))
    released = ok(post(worker, f"/api/resources/{lease['id']}/release",
                       {"lease_token": lease["lease_token"], "outcome": "success"}))
    assert released["state"] == ResourceState.AVAILABLE


def test_an_external_system_in_the_viewers_group_may_not_claim(django_user_model, alice):
    from django.contrib.auth.models import Group

    from audit.services import create_api_client
    from retryops import roles
    from tests.api_fixtures import keyed_client

    user = django_user_model.objects.create_user(username="svc-reports")
    user.groups.add(Group.objects.get(name=roles.VIEWERS))
    reader = keyed_client(create_api_client(name="reports", user=user, actor="test")[1])

    error = error_of(post(reader, "/api/resources/claim_next", {"pool": "accounts", "holder": "w"}), 403)
    assert "resources.claim_resource" in error["message"]
    assert Resource.objects.get(pk=alice.pk).state == ResourceState.AVAILABLE
