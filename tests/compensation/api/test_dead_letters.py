"""The dead-letter endpoints: list with the bulk replay's filters, read with its payload, replay
(strict by default, or on any resource), discard and resolve, each with its refusals."""

from datetime import timedelta

import pytest
from django.utils import timezone

from audit.models import AuditEntry
from compensation.models import DeadLetter
from compensation.services.dead_letters import collect_dead_letters
import resources.services
from resources.choices import ResourceState
from scheduling.models import Task
from tests.api_helpers import error_of, ok, post
from tests.compensation.conftest import dead_tasks
from tests.factories import AttemptFactory, TaskFactory

pytestmark = pytest.mark.django_db


def ids(api, query="") -> list[int]:
    return [letter["id"] for letter in ok(api.get(f"/api/dead-letters/?{query}"))["results"]]


def test_dead_letters_are_listed_newest_first_and_filtered_as_a_bulk_replay_filters(ops, pool, letters,
                                                                                   default_policy):
    on_alice, on_bob = letters
    dead_tasks(pool=pool, policy=default_policy, flow="noop", signature="ValueError: bad")
    [other] = collect_dead_letters()
    DeadLetter.objects.filter(pk=on_alice.pk).update(died_at=timezone.now() - timedelta(days=2))
    since = (timezone.now() - timedelta(days=1)).isoformat().replace("+", "%2B")

    assert ids(ops) == [other.pk, on_bob.pk, on_alice.pk]
    assert ids(ops, "flow=noop") == [other.pk]
    assert ids(ops, "error_signature=ValueError:%20bad") == [other.pk]
    assert ids(ops, "pool=accounts&flow=demo") == [on_bob.pk, on_alice.pk]
    assert ids(ops, f"resource={on_alice.resource_id}") == [on_alice.pk]
    assert ids(ops, f"died_before={since}") == [on_alice.pk]
    assert ids(ops, f"died_after={since}&flow=demo") == [on_bob.pk]
    assert ids(ops, "state=discarded") == []


@pytest.mark.parametrize("query", ["state=lost", "resource=x", "resource=0", "died_after=monday", "flow=a%00b"])
def test_a_bad_dead_letter_filter_is_400_naming_it(ops, db, query):
    assert list(error_of(ops.get(f"/api/dead-letters/?{query}"), 400)["details"]["fields"]) == [query.split("=")[0]]


def test_a_dead_letter_is_read_with_the_payload_a_replay_runs_again(ops, letters):
    body = ok(ops.get(f"/api/dead-letters/{letters[0].pk}/"))
    assert (body["state"], body["resource_key"], body["pool"], body["payload"]) == ("open", "alice@x", "accounts", {})


def test_an_unknown_dead_letter_is_404(ops, db):
    error = error_of(ops.get("/api/dead-letters/999999/"), 404)
    assert (error["code"], error["details"]) == ("not_found", {"kind": "dead_letter", "id": 999999})


def test_a_replay_is_strict_on_its_own_resource_and_audited_naming_the_client(ops, letters, alice):
    body = ok(post(ops, f"/api/dead-letters/{letters[0].pk}/replay", {"reason": "upstream is back"}))
    task = Task.objects.get(pk=body["replay_task"])
    assert (body["state"], body["replay_count"]) == ("replaying", 1)
    assert (task.strict, task.requested_resource_id) == (True, alice.pk)
    alice.refresh_from_db()
    assert (alice.state, alice.lease_holder) == (ResourceState.IN_USE, task.holder)
    entry = AuditEntry.objects.get(action="dead_letter.replay")
    assert (entry.actor, entry.channel, entry.reason) == ("api:oncall", "api", "upstream is back")


def test_a_replay_repeated_with_its_idempotency_key_answers_the_first_replay_and_starts_no_other(ops, letters):
    path = f"/api/dead-letters/{letters[0].pk}/replay"
    first = post(ops, path, HTTP_IDEMPOTENCY_KEY="replay-1")
    again = post(ops, path, HTTP_IDEMPOTENCY_KEY="replay-1")
    assert (again.status_code, again.json(), again["Idempotent-Replayed"]) == (200, first.json(), "true")
    assert Task.objects.filter(replay_of__isnull=False).count() == 1
    assert AuditEntry.objects.filter(action="dead_letter.replay").count() == 1


def test_a_replay_without_a_key_twice_is_409_illegal_transition(ops, letters):
    post(ops, f"/api/dead-letters/{letters[0].pk}/replay")
    error = error_of(post(ops, f"/api/dead-letters/{letters[0].pk}/replay"), 409)
    assert (error["code"], error["details"]["from_state"]) == ("illegal_transition", "replaying")


def test_a_strict_replay_on_a_quarantined_resource_is_409_replay_refused_saying_why(ops, letters, alice):
    resources.services.quarantine(resource=alice.pk, actor="ops", reason="banned upstream")
    error = error_of(post(ops, f"/api/dead-letters/{letters[0].pk}/replay"), 409)
    assert (error["code"], error["details"]["reason"]) == ("replay_refused", "quarantined")
    assert "banned upstream" in error["message"]


def test_a_replay_on_any_resource_starts_a_task_that_is_not_strict(ops, letters, alice):
    resources.services.quarantine(resource=alice.pk, actor="ops", reason="banned upstream")
    body = ok(post(ops, f"/api/dead-letters/{letters[0].pk}/replay", {"any_resource": True}))
    assert Task.objects.get(pk=body["replay_task"]).strict is False


@pytest.mark.parametrize("body, field", [({"any_resource": "yes"}, "any_resource"), ({"reason": ["x"]}, "reason"),
                                         ({"reason": "x" * 2001}, "reason")])
def test_a_bad_replay_body_is_400_naming_the_field(ops, letters, body, field):
    assert field in error_of(post(ops, f"/api/dead-letters/{letters[0].pk}/replay", body), 400)["details"]["fields"]


@pytest.mark.parametrize("action, state", [("discard", "discarded"), ("resolve", "resolved")])
def test_an_open_dead_letter_is_discarded_or_resolved_once_with_its_reason(ops, letters, action, state):
    body = ok(post(ops, f"/api/dead-letters/{letters[0].pk}/{action}", {"reason": "applied by hand"}))
    assert body["state"] == state and body["settled_at"]
    assert AuditEntry.objects.get(action=f"dead_letter.{action}").reason == "applied by hand"
    error = error_of(post(ops, f"/api/dead-letters/{letters[0].pk}/{action}"), 409)
    assert (error["code"], error["details"]["from_state"]) == ("illegal_transition", state)


@pytest.mark.parametrize("path", ["/api/dead-letters/999999/replay", "/api/dead-letters/999999/discard",
                                  "/api/dead-letters/999999/resolve"])
def test_an_action_on_an_unknown_dead_letter_is_404(ops, db, path):
    assert error_of(post(ops, path), 404)["code"] == "not_found"


def test_with_the_dlq_inspector_off_the_dead_letters_are_not_there(ops, letters, settings):
    settings.RETRYOPS_FLAGS_OFF = frozenset({"dlq-inspector"})
    for response in (ops.get("/api/dead-letters/"), ops.get(f"/api/dead-letters/{letters[0].pk}/"),
                     post(ops, f"/api/dead-letters/{letters[0].pk}/replay"),
                     post(ops, "/api/dead-letters/replay", {"dry_run": True}), ops.get("/api/bulk-replays/")):
        assert error_of(response, 404)["code"] == "feature_off"
    assert DeadLetter.objects.get(pk=letters[0].pk).state == "open"


@pytest.mark.parametrize("path", ["/api/dead-letters/{id}/replay", "/api/dead-letters/{id}/discard",
                                  "/api/dead-letters/{id}/resolve", "/api/dead-letters/replay"])
def test_a_reader_reads_dead_letters_but_is_refused_every_action_with_403(reader, letters, path):
    assert reader.get("/api/dead-letters/").status_code == 200
    assert reader.get(f"/api/dead-letters/{letters[0].pk}/").status_code == 200
    error = error_of(post(reader, path.format(id=letters[0].pk)), 403)
    assert "compensation." in error["message"]
    assert DeadLetter.objects.get(pk=letters[0].pk).state == "open"


@pytest.mark.parametrize("method, path", [("get", "/api/dead-letters/"), ("get", "/api/dead-letters/1/"),
                                          ("post", "/api/dead-letters/1/replay"), ("post", "/api/dead-letters/replay"),
                                          ("get", "/api/bulk-replays/1/")])
def test_a_request_without_a_key_is_401(client, db, method, path):
    assert getattr(client, method)(path).status_code == 401


def test_a_strict_replay_of_an_instance_that_succeeded_since_is_refused_though_another_task_ran_there_last(
        ops, pool, alice, default_policy):
    [dead] = dead_tasks(pool=pool, policy=default_policy, resource=alice)
    [letter] = collect_dead_letters()
    TaskFactory(pool=pool, policy=default_policy, payload=dead.payload, first_run=dead, state="succeeded",
                next_run_at=None, finished_at=timezone.now())
    later = TaskFactory(pool=pool, policy=default_policy, payload={"order": 43}, state="dead", next_run_at=None,
                        finished_at=timezone.now())
    AttemptFactory(task=later, resource=alice, outcome="failed", finished_at=timezone.now())
    error = error_of(post(ops, f"/api/dead-letters/{letter.pk}/replay"), 409)
    assert (error["code"], error["details"]["reason"]) == ("replay_refused", "succeeded")
    assert Task.objects.count() == 3
