"""Bulk replay through the API: the dry-run count, the start (202 with where to read its progress),
its progress and its cancellation, one running per filter."""

import pytest

from audit.models import AuditEntry
from compensation.models import BulkReplay
from tests.api_helpers import error_of, ok, post

pytestmark = pytest.mark.django_db

BULK = "/api/dead-letters/replay"


def test_a_dry_run_counts_the_open_dead_letters_it_would_replay_and_starts_nothing(ops, letters, alice):
    assert ok(post(ops, BULK, {"dry_run": True, "filter": {"flow": "demo"}})) == {"dry_run": True, "count": 2}
    assert ok(post(ops, BULK, {"dry_run": True, "filter": {"resource": alice.pk}}))["count"] == 1
    assert ok(post(ops, BULK, {"dry_run": True, "filter": {"flow": "noop"}}))["count"] == 0
    assert not BulkReplay.objects.exists()


def test_a_bulk_replay_is_started_with_its_velocity_limit_and_its_progress_at_its_location(ops, letters):
    response = post(ops, BULK, {"filter": {"flow": "demo", "pool": "accounts"}, "rate": 5, "dry_run": False})
    body = ok(response, 202)
    bulk = BulkReplay.objects.get()
    assert response["Location"] == f"/api/bulk-replays/{bulk.pk}/"
    assert (body["state"], body["selected"], body["rate"], body["any_resource"], body["requested_by"]) == (
        "running", 2, 5.0, False, "api:oncall")
    assert body["filter"] == {"flow": "demo", "pool": letters[0].pool_id}
    assert ok(ops.get(response["Location"]))["id"] == bulk.pk
    assert AuditEntry.objects.get(action="bulk_replay.start").actor == "api:oncall"


def test_a_second_bulk_replay_with_the_same_filter_is_409_while_the_first_runs(ops, letters):
    first = ok(post(ops, BULK, {"filter": {"flow": "demo"}, "dry_run": False}), 202)
    error = error_of(post(ops, BULK, {"filter": {"flow": "demo"}, "dry_run": False}), 409)
    assert (error["code"], error["details"]["bulk_replay_id"]) == ("bulk_replay_running", first["id"])


def test_a_bulk_replay_is_cancelled_once(ops, letters):
    bulk = ok(post(ops, BULK, {"filter": {}, "all": True, "dry_run": False}), 202)
    assert ok(post(ops, f"/api/bulk-replays/{bulk['id']}/cancel"))["state"] == "cancelled"
    error = error_of(post(ops, f"/api/bulk-replays/{bulk['id']}/cancel"), 409)
    assert (error["code"], error["details"]["from_state"]) == ("illegal_transition", "cancelled")
    assert [b["id"] for b in ok(ops.get("/api/bulk-replays/"))["results"]] == [bulk["id"]]


@pytest.mark.parametrize("body, field", [
    ({"filter": {"colour": "red"}}, "filter.colour"),
    ({"filter": {"died_after": "yesterday"}}, "filter.died_after"),
    ({"filter": {"died_after": "2026-01-01T00:00:00"}}, "filter.died_after"),
    ({"filter": {"resource": "alice"}}, "filter.resource"),
    ({"filter": []}, "filter.non_field_errors"),
    ({"rate": 0}, "rate"), ({"rate": 501}, "rate"), ({"rate": 10 ** 400}, "rate"),
    ({"dry_run": "true"}, "dry_run"), ({"any_resource": "no"}, "any_resource"), ({"all": 1}, "all"),
])
def test_a_bad_bulk_replay_body_is_400_naming_the_field(ops, db, body, field):
    error = error_of(post(ops, BULK, body), 400)
    assert field in error["details"]["fields"], error
    assert not BulkReplay.objects.exists()


def test_a_bulk_replay_of_an_unknown_pool_is_404(ops, db):
    assert error_of(post(ops, BULK, {"filter": {"pool": "nope"}}), 404)["code"] == "pool_not_found"


@pytest.mark.parametrize("path", ["/api/bulk-replays/999999/", "/api/bulk-replays/999999/cancel"])
def test_an_unknown_bulk_replay_is_404(ops, db, path):
    response = ops.get(path) if path.endswith("/") else post(ops, path)
    assert error_of(response, 404)["code"] == "not_found"


def test_a_reader_reads_bulk_replays_but_cannot_cancel_one(ops, reader, letters):
    bulk = ok(post(ops, BULK, {"filter": {}, "all": True, "dry_run": False}), 202)
    assert ok(reader.get(f"/api/bulk-replays/{bulk['id']}/"))["state"] == "running"
    assert error_of(post(reader, f"/api/bulk-replays/{bulk['id']}/cancel"), 403)["code"] == "permission_denied"


def test_a_chunked_dry_run_is_refused_411_and_replays_nothing(ops, letters):
    body = b'{"dry_run": true, "filter": {"pool": "no-such-pool"}}'
    # As gunicorn hands over a chunked request: Transfer-Encoding, and no Content-Length.
    response = ops.generic("POST", BULK, body, content_type="application/json", HTTP_TRANSFER_ENCODING="chunked",
                           CONTENT_LENGTH="")
    assert error_of(response, 411)["code"] == "length_required"
    assert not BulkReplay.objects.exists()


@pytest.mark.parametrize("body", [{}, {"filter": {}}, {"filter": {"flow": ""}}])
def test_a_bulk_replay_with_an_empty_filter_and_no_all_is_refused_and_writes_nothing(ops, letters, body):
    error = error_of(post(ops, BULK, {**body, "dry_run": False}), 400)
    assert "filter" in error["details"]["fields"] or error["details"].get("field") == "filter"
    assert not BulkReplay.objects.exists() and not AuditEntry.objects.filter(action="bulk_replay.start").exists()


def test_a_bulk_replay_of_every_open_dead_letter_says_all(ops, letters):
    body = ok(post(ops, BULK, {"all": True, "dry_run": False}), 202)
    assert (body["filter"], body["selected"]) == ({}, len(letters))


def test_a_dry_run_with_an_empty_filter_counts_them_all(ops, letters):
    assert ok(post(ops, BULK, {"dry_run": True})) == {"dry_run": True, "count": len(letters)}


def test_a_bulk_replay_that_does_not_say_dry_run_false_only_counts(ops, letters):
    # Wide and destructive: replaying starts only when asked for in so many words.
    assert ok(post(ops, BULK, {"filter": {"flow": "demo"}})) == {"dry_run": True, "count": len(letters)}
    assert not BulkReplay.objects.exists()
