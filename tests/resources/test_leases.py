"""Leases under timing faults: a fencing token that only grows, a sweep that gives a holder one
heartbeat interval after it first sees its lease lapsed, and a lease check on PostgreSQL's clock."""

import uuid
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from resources import services
from resources.choices import EventKind, ResourceState
from resources.errors import LeaseMismatch
from resources.models import Resource, ResourceEvent
from tests.factories import ResourceFactory, ResourcePoolFactory


def fresh(resource) -> Resource:
    return Resource.objects.get(pk=resource.pk)


def lapse(resource, *, seen_seconds_ago: float | None = None) -> None:
    """Move the lease's end into the past on the database's clock (and, if given, when a sweep saw it)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE resources_resource SET leased_until = statement_timestamp() - interval '1 second', "
            "lapse_seen_at = statement_timestamp() - make_interval(secs => %s) WHERE id = %s",
            [seen_seconds_ago, resource.pk])


@pytest.fixture
def short_pool(db):
    return ResourcePoolFactory(name="short", lease_seconds=30)  # a heartbeat interval of 10 s


@pytest.fixture
def alice(short_pool):
    return ResourceFactory(pool=short_pool, key="alice@x")


def test_every_grant_of_a_resource_has_a_higher_fencing_token(alice):
    first = services.claim_by_id(resource_id=alice.pk, holder="task 1")
    services.release(resource=alice, lease_token=first.lease_token, outcome="success")
    second = services.claim_next(pool=alice.pool, holder="task 2")
    services.release(resource=alice, lease_token=second.lease_token, outcome="failure", error="timed out")
    third = services.claim_by_id(resource_id=alice.pk, holder="task 3", reserve=True)
    used = services.extend_lease(resource=alice, lease_token=third.lease_token, use=True)
    assert [first.fencing_token, second.fencing_token, third.fencing_token, used.fencing_token] == [1, 2, 3, 4]


def test_a_renewal_does_not_change_the_fencing_token(alice):
    claimed = services.claim_by_id(resource_id=alice.pk, holder="task 1")
    assert services.extend_lease(resource=alice, lease_token=claimed.lease_token).fencing_token == claimed.fencing_token


def test_a_lapsed_lease_is_only_marked_by_the_first_sweep_that_sees_it(alice):
    services.claim_by_id(resource_id=alice.pk, holder="task 1")
    lapse(alice)
    assert services.sweep_expired_leases() == []
    row = fresh(alice)
    assert row.state == ResourceState.IN_USE and row.lapse_seen_at is not None


def test_a_lapsed_lease_is_taken_a_heartbeat_interval_after_a_sweep_first_saw_it(alice):
    claimed = services.claim_by_id(resource_id=alice.pk, holder="task 1")
    lapse(alice, seen_seconds_ago=5)
    assert services.sweep_expired_leases() == []  # 5 s of the 10 s heartbeat interval
    lapse(alice, seen_seconds_ago=11)
    [swept] = services.sweep_expired_leases()
    assert (swept.resource_id, swept.lease_token) == (alice.pk, claimed.lease_token)
    assert fresh(alice).state == ResourceState.FAILED


def test_a_holder_that_renews_after_its_lapse_was_seen_keeps_its_lease(alice):
    claimed = services.claim_by_id(resource_id=alice.pk, holder="task 1")
    lapse(alice, seen_seconds_ago=5)
    services.extend_lease(resource=alice, lease_token=claimed.lease_token)
    with connection.cursor() as cursor:  # as if the database had been away while the lease ran out
        cursor.execute("UPDATE resources_resource SET leased_until = statement_timestamp() - interval '1 second' "
                       "WHERE id = %s", [alice.pk])
    assert fresh(alice).lapse_seen_at is None
    assert services.sweep_expired_leases() == []
    assert fresh(alice).lease_token == claimed.lease_token


def test_a_lease_is_extended_from_the_databases_clock(alice):
    claimed = services.claim_by_id(resource_id=alice.pk, holder="task 1")
    renewed = services.extend_lease(resource=alice, lease_token=claimed.lease_token, seconds=60)
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement_timestamp()")
        db_now = cursor.fetchone()[0]
    assert timedelta(seconds=59) < renewed.leased_until - db_now <= timedelta(seconds=60)


def test_a_held_lease_passes_the_check(alice):
    claimed = services.claim_by_id(resource_id=alice.pk, holder="task 1")
    services.check_lease(resource=alice, lease_token=claimed.lease_token)


def test_a_lease_that_ran_out_fails_the_check_before_any_sweep(alice):
    claimed = services.claim_by_id(resource_id=alice.pk, holder="task 1")
    lapse(alice)
    with pytest.raises(LeaseMismatch, match="has run out") as raised:
        services.check_lease(resource=alice, lease_token=claimed.lease_token)
    assert raised.value.why == "expired"


def test_a_lease_handed_on_fails_the_check_naming_the_new_holder(alice):
    claimed = services.claim_by_id(resource_id=alice.pk, holder="task 1")
    services.sweep_expired_leases(now=timezone.now() + timedelta(hours=1))
    services.claim_by_id(resource_id=alice.pk, holder="task 2")
    with pytest.raises(LeaseMismatch, match="now held by task 2"):
        services.check_lease(resource=alice, lease_token=claimed.lease_token)
    with pytest.raises(LeaseMismatch):
        services.check_lease(resource=alice, lease_token=uuid.uuid4())
    assert ResourceEvent.objects.filter(resource=alice, kind=EventKind.LEASE_EXPIRED).count() == 1
