"""GET /api/resources/{id}/retry_history: attempts and events newest first, totals at the top,
cursor-paginated."""

import json

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

import resources.services
from resources.models import ResourceEvent
from scheduling.models import Attempt
from tests.factories import AttemptFactory, ResourceFactory, TaskFactory
from tests.scheduling.api.test_retry import fail_on, retry

pytestmark = pytest.mark.django_db


def history(api, path):
    response = api.get(path)
    assert response.status_code == 200, response.content
    return response.json()


# Each claim and release commits on its own here, as they do in production: their events' times are
# their transactions' (PostgreSQL's now()), which one test transaction would make all the same.
@pytest.mark.django_db(transaction=True)
def test_the_history_merges_attempts_and_events_newest_first_with_the_totals_first(api, alice):
    task = fail_on(alice)
    body = history(api, f"/api/resources/{alice.pk}/retry_history")
    assert list(body)[0] == "totals"
    assert body["totals"]["successes"] == 0 and body["totals"]["failures"] == 1
    assert body["totals"]["consecutive_failures"] == 1 and body["totals"]["state"] == "failed"
    assert body["totals"]["last_failure"]["reason"] == "TimeoutError: read timed out"
    assert [e["kind"] for e in body["results"]] == ["released_failure", "attempt", "claimed"]
    times = [e["time"] for e in body["results"]]
    assert times == sorted(times, reverse=True)
    released, attempt, claimed = body["results"]
    assert (attempt["outcome"], attempt["error"], attempt["signature"], attempt["category"], attempt["task"]) == (
        "failed", "TimeoutError: read timed out", "TimeoutError: read timed out", "retryable", task.pk)
    assert (released["outcome"], released["task"], released["actor"], released["category"]) == (
        "failure", task.pk, task.holder, "retryable")
    assert released["signature"] == "TimeoutError: read timed out"
    assert (claimed["outcome"], claimed["task"]) == (None, task.pk)
    assert body["next"] is None


# Committed as in production: the reset and the claim share the retry's transaction, each timed by
# its own statement on PostgreSQL's clock (as attempts are), so the times read in the order things
# happened.
@pytest.mark.django_db(transaction=True)
def test_a_strict_retrys_reset_comes_before_its_claim_in_time_as_in_order(api, alice, default_policy):
    fail_on(alice)
    assert retry(api, alice).status_code == 201
    results = history(api, f"/api/resources/{alice.pk}/retry_history")["results"]
    assert [e["kind"] for e in results] == ["claimed", "reset", "released_failure", "attempt", "claimed"]
    times = [e["time"] for e in results]
    assert times == sorted(times, reverse=True) and results[0]["time"] > results[1]["time"]


def test_an_operators_reset_is_in_the_history_with_its_actor_and_no_task(api, alice):
    fail_on(alice)
    resources.services.reset(resource=alice, actor="ops:carol", reason="upstream fixed")
    newest = history(api, f"/api/resources/{alice.pk}/retry_history")["results"][0]
    assert (newest["kind"], newest["actor"], newest["task"], newest["outcome"]) == ("reset", "ops:carol", None, None)


def test_a_clients_lease_belongs_to_no_task_whatever_its_holder_reads(api, alice):
    lease = resources.services.claim_by_id(resource_id=alice.pk, holder="task 1")
    resources.services.release(resource=lease, lease_token=lease.lease_token, outcome="success")
    results = history(api, f"/api/resources/{alice.pk}/retry_history")["results"]
    assert [(e["kind"], e["task"]) for e in results] == [("released_success", None), ("claimed", None)]
    assert results[1]["actor"] == "task 1"


def test_every_entry_is_on_exactly_one_page_following_next(api, alice):
    for _ in range(4):
        fail_on(alice)
        resources.services.reset(resource=alice, actor="ops", reason="again")
    everything = history(api, f"/api/resources/{alice.pk}/retry_history?page_size=500")["results"]
    assert len(everything) == 16
    pages, path = [], f"/api/resources/{alice.pk}/retry_history?page_size=3"
    while path:
        body = history(api, path)
        pages.append(body["results"])
        path = body["next"]
    assert [len(page) for page in pages] == [3, 3, 3, 3, 3, 1]
    assert [entry for page in pages for entry in page] == everything


def test_the_history_is_read_by_pool_and_key_too(api, alice):
    fail_on(alice)
    by_key = history(api, "/api/pools/accounts/resources/alice@x/retry_history/")
    assert by_key == history(api, f"/api/resources/{alice.pk}/retry_history")


def test_another_resources_history_is_not_shown(api, alice, pool):
    fail_on(ResourceFactory(pool=pool, key="bob@x"))
    assert history(api, f"/api/resources/{alice.pk}/retry_history")["results"] == []


def test_a_resource_that_never_failed_has_no_last_failure(api, alice):
    assert history(api, f"/api/resources/{alice.pk}/retry_history")["totals"]["last_failure"] is None


@pytest.mark.parametrize("query", ["cursor=xyz", "cursor=YT0w", "cursor=Yj0x", "cursor=YT05OTk5OTk5OTk5OTk5OTk5OTk5",
                                   "page_size=0", "page_size=x"])
def test_a_cursor_or_page_size_this_api_did_not_give_is_bad_input(api, alice, query):
    response = api.get(f"/api/resources/{alice.pk}/retry_history?{query}")
    assert response.status_code == 400, response.content
    assert list(response.json()["error"]["details"]["fields"]) == [query.split("=")[0]]


def test_a_viewer_reads_the_history(viewer_api, alice):
    assert viewer_api.get(f"/api/resources/{alice.pk}/retry_history").status_code == 200


def test_the_history_of_an_unknown_resource_is_404(api, db):
    assert api.get("/api/resources/424242/retry_history").status_code == 404


def test_a_page_has_exactly_the_fields_its_schema_documents(api, alice):
    from scheduling.api.serializers import (
        HistoryEntrySerializer,
        RetryHistorySerializer,
        TotalsSerializer,
    )

    fail_on(alice)
    body = history(api, f"/api/resources/{alice.pk}/retry_history")
    assert set(body) == set(RetryHistorySerializer().fields)
    assert set(body["totals"]) == set(TotalsSerializer().fields)
    assert {frozenset(entry) for entry in body["results"]} == {frozenset(HistoryEntrySerializer().fields)}


def queries_of_a_page(api, resource) -> list[str]:
    with CaptureQueriesContext(connection) as captured:
        history(api, f"/api/resources/{resource.pk}/retry_history")
    return [query["sql"] for query in captured.captured_queries]


def test_a_page_costs_the_same_three_queries_however_long_the_history(api, alice, keys_kept):
    fail_on(alice)
    history(api, f"/api/resources/{alice.pk}/retry_history")  # the key's last use is written once a minute
    short = queries_of_a_page(api, alice)
    for _ in range(10):
        resources.services.reset(resource=alice, actor="ops", reason="again")
        fail_on(alice)
    long = queries_of_a_page(api, alice)
    assert len(history(api, f"/api/resources/{alice.pk}/retry_history")["results"]) == 11 * 3 + 10
    # The resource with its pool, the attempts, the events (the key was read a moment ago: its
    # client comes from the process's cache, audit.keycache).
    assert len(long) == len(short) == 3, "\n".join(long)


def index_read(sql: str) -> str:
    """The index (or "Seq Scan") the plan of `sql` reads its table by."""
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN (FORMAT JSON) {sql}")
        document = cursor.fetchone()[0]
    (top,) = json.loads(document) if isinstance(document, str) else document
    node = top["Plan"]
    while "Plans" in node and "Index Name" not in node:
        node = node["Plans"][0]
    return node.get("Index Name", node["Node Type"])


def test_a_resource_holding_most_of_the_rows_is_read_on_its_history_indexes_not_the_primary_keys(api, alice, bob):
    # Alice failed a thousand times, then went quiet while bob kept working: PostgreSQL takes her rows
    # to be spread over the ids, and walking the primary keys backwards from the newest (bob's) then
    # looks as cheap as her own index, yet skips every row bob wrote since.
    task, numbers = TaskFactory(pool=alice.pool), iter(range(1, 10_000))
    for resource, count in ((alice, 1500), (bob, 500)):
        Attempt.objects.bulk_create(AttemptFactory.build(task=task, resource=resource, number=next(numbers),
                                                         outcome="failed", finished_at=timezone.now())
                                    for _ in range(count))
        ResourceEvent.objects.bulk_create(ResourceEvent(resource=resource, kind="claimed", actor=task.holder)
                                          for _ in range(2 * count))
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {Attempt._meta.db_table}, {ResourceEvent._meta.db_table}")
    tables = [f'FROM "{model._meta.db_table}"' for model in (Attempt, ResourceEvent)]
    reads = [index_read(sql) for sql in queries_of_a_page(api, alice) if any(table in sql for table in tables)]
    assert reads == ["attempt_resource_history_idx", "resource_event_timeline_idx"]
