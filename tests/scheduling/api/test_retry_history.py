"""GET /api/resources/{id}/retry_history: attempts and events newest first, totals at the top,
cursor-paginated."""

import pytest

from resources import services as pool_services
from tests.factories import ResourceFactory
from tests.scheduling.api.test_retry import fail_on

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


def test_an_operators_reset_is_in_the_history_with_its_actor_and_no_task(api, alice):
    fail_on(alice)
    pool_services.reset(resource=alice, actor="ops:carol", reason="upstream fixed")
    newest = history(api, f"/api/resources/{alice.pk}/retry_history")["results"][0]
    assert (newest["kind"], newest["actor"], newest["task"], newest["outcome"]) == ("reset", "ops:carol", None, None)


def test_every_entry_is_on_exactly_one_page_following_next(api, alice):
    for _ in range(4):
        fail_on(alice)
        pool_services.reset(resource=alice, actor="ops", reason="again")
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
