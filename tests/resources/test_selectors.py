from datetime import timedelta

import pytest
from django.utils import timezone

from resources import selectors, services
from resources.choices import EventKind, ResourceState
from resources.classification import classify
from resources.errors import ResourceNotFound
from retryops.errors import BadInput, NotFound
from resources.models import Resource
from tests.factories import ResourceFactory, ResourcePoolFactory


def fail(resource, error="TimeoutError: slow", **extra):
    lease = services.claim_by_id(resource_id=resource.pk, holder="task 1")
    return services.release(resource=resource, lease_token=lease.lease_token, outcome="failure", error=error, **extra)


def test_get_pool_finds_a_pool_by_name_or_id(pool):
    assert selectors.get_pool("accounts") == pool
    assert selectors.get_pool(pool.pk) == pool


def test_get_pool_of_an_unknown_name_names_it(db):
    with pytest.raises(NotFound, match="no resource pool 'nope'") as caught:
        selectors.get_pool("nope")
    assert (caught.value.code, caught.value.details) == ("pool_not_found", {"pool": "nope"})


def test_get_resource_by_pool_and_key_loads_its_pool(alice):
    found = selectors.get_resource(pool="accounts", key="alice@x")
    assert found.pk == alice.pk and found.pool.name == "accounts"


def test_get_resource_of_an_unknown_key_names_pool_and_key(pool):
    with pytest.raises(ResourceNotFound, match="pool accounts has no account with key 'ghost@x'") as caught:
        selectors.get_resource(pool="accounts", key="ghost@x")
    assert caught.value.details["key"] == "ghost@x"


def test_get_resource_without_a_name_is_bad_input(db):
    with pytest.raises(BadInput) as caught:
        selectors.get_resource(pool="accounts")
    assert caught.value.details["field"] == "resource_id"


def test_get_resource_with_an_id_past_bigint_is_bad_input(db):
    with pytest.raises(BadInput):
        selectors.get_resource(resource_id=2**63)


def test_describe_unavailability_names_the_holder_of_an_in_use_resource(claimed_alice):
    error = selectors.describe_unavailability(selectors.get_resource(resource_id=claimed_alice.pk))
    assert (error.code, error.reason, error.resource_id) == ("resource_unavailable", "in_use", claimed_alice.pk)
    assert "in use by task 812" in str(error)


def test_describe_unavailability_never_gives_available_as_the_reason(alice):
    error = selectors.describe_unavailability(alice)
    assert error.reason == "in_use" and "try again" in str(error)


def test_pool_state_counts_counts_each_state_per_pool(pool, claimed_alice, bob):
    other = ResourcePoolFactory(name="keys")
    ResourceFactory(pool=other)
    assert selectors.pool_state_counts() == {
        pool.pk: {ResourceState.IN_USE: 1, ResourceState.AVAILABLE: 1},
        other.pk: {ResourceState.AVAILABLE: 1},
    }
    assert selectors.pool_state_counts(pool="keys") == {other.pk: {ResourceState.AVAILABLE: 1}}


def test_recently_failed_lists_retryable_failures_since_a_moment_newest_first(pool, alice, bob):
    carol = ResourceFactory(pool=pool, key="carol@x")
    for minutes_ago, resource in [(3, alice), (2, bob)]:
        fail(resource)
        Resource.objects.filter(pk=resource.pk).update(last_failure_at=timezone.now() - timedelta(minutes=minutes_ago))
    fail(carol, error="HTTP 403 banned")  # quarantined, never a candidate
    since = timezone.now() - timedelta(minutes=5)
    assert [r.key for r in selectors.recently_failed(pool="accounts", since=since)] == ["bob@x", "alice@x"]


def test_recently_failed_leaves_out_failures_before_the_window(alice):
    fail(alice)
    assert list(selectors.recently_failed(pool="accounts", since=timezone.now() + timedelta(seconds=1))) == []


def test_due_for_probe_lists_quarantines_whose_cooldown_is_over(alice, bob):
    fail(alice, error="risk control", classification=classify("banned"), probation_seconds=600)
    fail(bob, error="banned")  # a permanent quarantine: no probe
    assert selectors.due_for_probe() == []
    assert [r.pk for r in selectors.due_for_probe(now=timezone.now() + timedelta(seconds=601))] == [alice.pk]


def test_timeline_lists_a_resources_events_newest_first(alice):
    fail(alice)
    services.reset(resource=alice, actor="ops")
    assert [e.kind for e in selectors.timeline_page(resource=alice, page=1)] == [
        EventKind.RESET, EventKind.RELEASED_FAILURE, EventKind.CLAIMED]
    assert [e.kind for e in selectors.timeline_page(resource=alice.pk, page=1, per_page=1)] == [EventKind.RESET]


@pytest.mark.parametrize("by", ["id", "name"])
def test_the_available_bounds_read_uses_the_available_index(pool, by):
    from django.db import connection

    from resources import sql

    ResourceFactory.create_batch(3, pool=pool)
    named = {"pool_id": pool.pk, "pool_name": None} if by == "id" else {"pool_id": None, "pool_name": pool.name}
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("EXPLAIN " + sql.AVAILABLE_BOUNDS, named)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "resource_available_idx" in plan


def test_a_probe_limit_below_one_is_bad_input(db):
    with pytest.raises(BadInput):
        selectors.due_for_probe(limit=-1)


def test_describe_unavailability_says_a_lease_that_ran_out_will_be_swept_not_in_use_until_the_past(claimed_alice):
    Resource.objects.filter(pk=claimed_alice.pk).update(leased_until=timezone.now() - timedelta(seconds=5), lapse_seen_at=timezone.now() - timedelta(hours=1))

    error = selectors.describe_unavailability(selectors.get_resource(resource_id=claimed_alice.pk))

    assert error.reason == "in_use" and error.details["holder"] == "task 812"
    assert "whose lease ran out at" in str(error) and "the next lease sweep frees it" in str(error)
