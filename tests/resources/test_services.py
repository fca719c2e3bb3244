import uuid
from contextlib import contextmanager
from datetime import timedelta

import pytest
from django.db import IntegrityError, transaction
from django.utils import timezone

from resources import services
from resources.choices import EventKind, FailureCategory, ResourceState
from resources.errors import LeaseMismatch, PoolExhausted, ResourceUnavailable
from retryops.errors import BadInput, DomainError, IllegalTransition, NotFound
from resources.models import Resource, ResourceEvent, ResourcePool
from tests.factories import ResourceFactory, ResourcePoolFactory


def kinds(resource):
    return list(ResourceEvent.objects.filter(resource_id=resource.pk).order_by("id").values_list("kind", flat=True))


def fresh(resource):
    return Resource.objects.get(pk=resource.pk)


# claim_next


def test_claim_next_takes_an_available_resource_and_leases_it(alice):
    claimed = services.claim_next(pool="accounts", holder="task 1")
    row = fresh(claimed)
    assert row.pk == alice.pk
    assert row.state == ResourceState.IN_USE
    assert row.lease_holder == "task 1"
    assert row.lease_token == claimed.lease_token
    assert row.leased_until - row.leased_at == timedelta(seconds=300)
    assert kinds(row) == [EventKind.CLAIMED]


def test_claim_next_never_hands_out_a_resource_twice(pool):
    ResourceFactory.create_batch(5, pool=pool)
    taken = {services.claim_next(pool=pool, holder=f"task {n}").pk for n in range(5)}
    assert len(taken) == 5


def test_claim_next_on_an_empty_pool_says_what_the_resources_are_doing(pool, claimed_alice, bob):
    ResourceFactory(pool=pool, state=ResourceState.FAILED)
    services.quarantine(resource=bob, actor="ops", reason="banned upstream")
    with pytest.raises(PoolExhausted, match=r"pool accounts has no available account: 1 failed, 1 in use, 1 quarantined"):
        services.claim_next(pool="accounts", holder="task 2")


def test_claim_next_of_an_unknown_pool_names_it(db):
    with pytest.raises(NotFound, match="no resource pool 'nope'"):
        services.claim_next(pool="nope", holder="task 1")


def test_claim_next_skips_failed_and_quarantined_resources(pool, alice, bob):
    ResourceFactory(pool=pool, key="carol@x", state=ResourceState.FAILED)
    services.quarantine(resource=bob, actor="ops", reason="suspended")
    assert services.claim_next(pool=pool, holder="task 1").pk == alice.pk


def test_claim_next_uses_the_lease_length_asked_for(alice):
    claimed = services.claim_next(pool="accounts", holder="task 1", lease_seconds=30)
    assert claimed.leased_until - claimed.leased_at == timedelta(seconds=30)


# claim_by_id


def test_strict_claim_by_key_takes_exactly_that_resource(alice, bob):
    claimed = services.claim_by_id(pool="accounts", key="bob@x", holder="task 9")
    assert claimed.pk == bob.pk


def test_strict_claim_of_in_use_resource_names_the_holder(claimed_alice, bob):
    with pytest.raises(ResourceUnavailable, match=r"account alice@x is in use by task 812 until \d\d:\d\d") as caught:
        services.claim_by_id(resource_id=claimed_alice.pk, holder="task 900")
    assert (caught.value.code, caught.value.reason, caught.value.details["reason"]) == (
        "resource_unavailable", "in_use", "in_use")
    assert fresh(bob).state == ResourceState.AVAILABLE


def test_strict_claim_of_quarantined_resource_gives_the_quarantine_reason(alice):
    services.quarantine(resource=alice, actor="ops", reason="account banned")
    with pytest.raises(ResourceUnavailable, match="account alice@x is quarantined since .*: account banned") as caught:
        services.claim_by_id(resource_id=alice.pk, holder="task 1")
    assert (caught.value.code, caught.value.reason, caught.value.details["reason"]) == (
        "resource_unavailable", "quarantined", "quarantined")


def test_strict_claim_of_consumed_resource_says_it_is_done(db):
    pool = ResourcePoolFactory(name="coupons", resource_noun="coupon", consume_on_success=True)
    coupon = ResourceFactory(pool=pool, key="SAVE10")
    lease = services.claim_by_id(resource_id=coupon.pk, holder="task 1")
    services.release(resource=coupon, lease_token=lease.lease_token, outcome="success")
    with pytest.raises(ResourceUnavailable, match="coupon SAVE10 was consumed") as caught:
        services.claim_by_id(pool="coupons", key="SAVE10", holder="task 2")
    assert (caught.value.code, caught.value.reason, caught.value.details["reason"]) == (
        "resource_unavailable", "done", "done")


def test_strict_claim_of_missing_resource_names_the_key(pool):
    with pytest.raises(ResourceUnavailable, match="pool accounts has no account with key 'ghost@x'") as caught:
        services.claim_by_id(pool="accounts", key="ghost@x", holder="task 1")
    assert (caught.value.code, caught.value.reason, caught.value.details["reason"]) == (
        "resource_unavailable", "missing", "missing")


def test_strict_claim_of_a_failed_resource_is_allowed_so_operators_can_retry_it(claimed_alice):
    services.release(resource=claimed_alice, lease_token=claimed_alice.lease_token, outcome="failure",
                     error="TimeoutError: upstream")
    again = services.claim_by_id(resource_id=claimed_alice.pk, holder="task 813")
    assert again.state == ResourceState.IN_USE


def test_non_strict_claim_of_in_use_resource_falls_back_to_another(claimed_alice, bob):
    claimed = services.claim_by_id(resource_id=claimed_alice.pk, holder="task 900", strict=False)
    assert claimed.pk == bob.pk


def test_non_strict_claim_of_missing_key_falls_back_to_the_pool(alice):
    claimed = services.claim_by_id(pool="accounts", key="ghost@x", holder="task 900", strict=False)
    assert claimed.pk == alice.pk


# release


def test_release_with_success_counts_it_and_frees_the_resource(claimed_alice):
    released = services.release(resource=claimed_alice, lease_token=claimed_alice.lease_token, outcome="success")
    row = fresh(released)
    assert row.state == ResourceState.AVAILABLE
    assert row.success_count == 1 and row.last_success_at is not None
    assert row.lease_token is None and row.lease_holder == ""
    assert kinds(row) == [EventKind.CLAIMED, EventKind.RELEASED_SUCCESS]


def test_release_with_success_consumes_the_resource_when_the_pool_says_so(db):
    coupon = ResourceFactory(pool=ResourcePoolFactory(consume_on_success=True))
    lease = services.claim_next(pool=coupon.pool, holder="task 1")
    assert services.release(resource=coupon, lease_token=lease.lease_token, outcome="success").state == "done"


def test_retryable_failure_records_reason_and_statistics(claimed_alice):
    services.release(resource=claimed_alice, lease_token=claimed_alice.lease_token, outcome="failure",
                     error=TimeoutError("upstream took 30s"))
    row = fresh(claimed_alice)
    assert row.state == ResourceState.FAILED
    assert (row.failure_count, row.consecutive_failures) == (1, 1)
    assert row.last_failure_reason == "TimeoutError: upstream took 30s"
    assert row.last_failure_category == FailureCategory.RETRYABLE
    event = ResourceEvent.objects.filter(resource=row, kind=EventKind.RELEASED_FAILURE).get()
    assert (event.reason, event.category) == (row.last_failure_reason, "retryable")


def test_non_retryable_failure_quarantines_the_resource(claimed_alice):
    services.release(resource=claimed_alice, lease_token=claimed_alice.lease_token, outcome="failure",
                     error=PermissionError("HTTP 403: account banned"))
    row = fresh(claimed_alice)
    assert row.state == ResourceState.QUARANTINED
    assert row.quarantine_reason == "PermissionError: HTTP 403: account banned"
    assert row.last_failure_category == FailureCategory.NON_RETRYABLE
    assert kinds(row) == [EventKind.CLAIMED, EventKind.RELEASED_FAILURE, EventKind.QUARANTINED]


def test_success_ends_a_run_of_consecutive_failures_but_keeps_the_total(alice):
    for _ in range(2):
        lease = services.claim_by_id(resource_id=alice.pk, holder="task 1")
        services.release(resource=alice, lease_token=lease.lease_token, outcome="failure", error="timeout")
    lease = services.claim_by_id(resource_id=alice.pk, holder="task 1")
    services.release(resource=alice, lease_token=lease.lease_token, outcome="success")
    row = fresh(alice)
    assert (row.failure_count, row.consecutive_failures, row.success_count) == (2, 0, 1)
    assert row.last_failure_reason == "timeout"


def test_release_with_a_foreign_token_is_rejected_and_changes_nothing(claimed_alice):
    with pytest.raises(LeaseMismatch, match="was never granted on account alice@x; it is now held by task 812"):
        services.release(resource=claimed_alice, lease_token=uuid.uuid4(), outcome="success")
    row = fresh(claimed_alice)
    assert row.state == ResourceState.IN_USE and row.success_count == 0
    assert kinds(row) == [EventKind.CLAIMED]


def test_a_late_worker_cannot_release_a_resource_someone_else_now_holds(claimed_alice):
    old_token = claimed_alice.lease_token
    services.release(resource=claimed_alice, lease_token=old_token, outcome="success")
    services.claim_by_id(resource_id=claimed_alice.pk, holder="task 813")
    with pytest.raises(LeaseMismatch, match="was already released; it is now held by task 813"):
        services.release(resource=claimed_alice, lease_token=old_token, outcome="failure", error="timeout")
    assert fresh(claimed_alice).lease_holder == "task 813"


def test_release_with_a_token_that_is_not_a_uuid_says_so(claimed_alice):
    with pytest.raises(LeaseMismatch, match="'abc' is not a UUID"):
        services.release(resource=claimed_alice, lease_token="abc", outcome="success")


def test_release_uses_the_callers_classification(claimed_alice):
    from resources.classification import classify

    verdict = classify("captcha required", non_retryable_patterns=["captcha"])
    services.release(resource=claimed_alice, lease_token=claimed_alice.lease_token, outcome="failure",
                     error="captcha required", classification=verdict)
    assert fresh(claimed_alice).state == ResourceState.QUARANTINED


# leases


def test_extend_lease_pushes_the_end_of_the_lease(claimed_alice):
    extended = services.extend_lease(resource=claimed_alice, lease_token=claimed_alice.lease_token, seconds=3600)
    assert extended.leased_until > timezone.now() + timedelta(minutes=59)


def test_extend_lease_with_a_stale_token_is_rejected(claimed_alice):
    with pytest.raises(LeaseMismatch):
        services.extend_lease(resource=claimed_alice, lease_token=uuid.uuid4())


def test_sweep_takes_back_expired_leases_as_retryable_failures(claimed_alice, bob):
    live = services.claim_by_id(resource_id=bob.pk, holder="task 2")
    swept = services.sweep_expired_leases(now=timezone.now() + timedelta(seconds=301))
    # Both leases began at the test transaction's now(), so they end at the same moment: no order.
    assert {(s.resource_id, s.lease_token, s.holder) for s in swept} == {
        (claimed_alice.pk, claimed_alice.lease_token, "task 812"),
        (bob.pk, live.lease_token, "task 2"),
    }
    row = fresh(claimed_alice)
    assert row.state == ResourceState.FAILED
    assert (row.last_failure_reason, row.last_failure_category, row.failure_count) == ("lease expired", "retryable", 1)
    assert kinds(row) == [EventKind.CLAIMED, EventKind.LEASE_EXPIRED]


def test_sweep_leaves_leases_that_have_not_expired(claimed_alice):
    assert services.sweep_expired_leases() == []
    assert fresh(claimed_alice).state == ResourceState.IN_USE


def test_releasing_a_swept_lease_explains_that_it_expired(claimed_alice):
    services.sweep_expired_leases(now=timezone.now() + timedelta(hours=1))
    with pytest.raises(LeaseMismatch, match="expired and was swept back at .*; it is now failed"):
        services.release(resource=claimed_alice, lease_token=claimed_alice.lease_token, outcome="success")


# reset, quarantine, unquarantine


def test_reset_makes_a_failed_resource_available_and_keeps_its_history(claimed_alice):
    services.release(resource=claimed_alice, lease_token=claimed_alice.lease_token, outcome="failure",
                     error="ConnectionResetError: peer reset")
    services.reset(resource=claimed_alice, actor="ops:carol", reason="network fixed")
    row = fresh(claimed_alice)
    assert row.state == ResourceState.AVAILABLE
    assert (row.failure_count, row.last_failure_reason) == (1, "ConnectionResetError: peer reset")
    assert kinds(row) == [EventKind.CLAIMED, EventKind.RELEASED_FAILURE, EventKind.RESET]
    reset_event = ResourceEvent.objects.filter(resource=row, kind=EventKind.RESET).get()
    assert (reset_event.actor, reset_event.reason, reset_event.details) == ("ops:carol", "network fixed", {"from": "failed"})


def test_reset_of_an_in_use_resource_is_an_illegal_transition(claimed_alice):
    with pytest.raises(IllegalTransition, match="cannot reset account alice@x: it is in use; only failed or done ones"):
        services.reset(resource=claimed_alice, actor="ops")
    assert kinds(claimed_alice) == [EventKind.CLAIMED]


def test_reset_of_an_available_resource_is_an_illegal_transition(alice):
    with pytest.raises(IllegalTransition, match="it is available"):
        services.reset(resource=alice, actor="ops")


def test_quarantine_of_an_in_use_resource_is_refused(claimed_alice):
    with pytest.raises(IllegalTransition, match="cannot quarantine account alice@x: it is in use"):
        services.quarantine(resource=claimed_alice, actor="ops", reason="suspicious")


def test_unquarantine_returns_the_resource_and_the_timeline_keeps_the_reason(alice):
    services.quarantine(resource=alice, actor="ops", reason="risk control block")
    services.unquarantine(resource=alice, actor="ops:dave", reason="block lifted")
    row = fresh(alice)
    assert (row.state, row.quarantine_reason, row.quarantined_at) == (ResourceState.AVAILABLE, "", None)
    event = ResourceEvent.objects.filter(resource=row, kind=EventKind.UNQUARANTINED).get()
    assert event.details == {"quarantine_reason": "risk control block"}


def test_unquarantine_of_a_resource_not_in_quarantine_is_refused(alice):
    with pytest.raises(IllegalTransition, match="only quarantined ones"):
        services.unquarantine(resource=alice, actor="ops")


# the database backs the invariants even against code that bypasses the services


def test_database_refuses_an_in_use_resource_without_a_lease(alice):
    with pytest.raises(IntegrityError, match="resource_lease_iff_in_use"), transaction.atomic():
        Resource.objects.filter(pk=alice.pk).update(state=ResourceState.IN_USE)


def test_database_refuses_a_quarantine_without_a_reason(alice):
    with pytest.raises(IntegrityError, match="resource_quarantine_has_reason"), transaction.atomic():
        Resource.objects.filter(pk=alice.pk).update(state=ResourceState.QUARANTINED, quarantined_at=timezone.now())


def test_database_refuses_a_duplicate_key_in_one_pool(alice):
    with pytest.raises(IntegrityError, match="resource_key_unique_in_pool"), transaction.atomic():
        ResourceFactory(pool=alice.pool, key="alice@x")


# holds and probes (what the scheduler uses)


def test_hold_after_failure_counts_the_failure_and_keeps_the_lease(claimed_alice):
    from resources.classification import classify

    until = timezone.now() + timedelta(minutes=5)
    services.hold_after_failure(resource=claimed_alice, lease_token=claimed_alice.lease_token, error="timeout",
                                classification=classify("timeout"), hold_until=until, actor="task 812")
    row = fresh(claimed_alice)
    assert (row.state, row.lease_token, row.leased_until) == (ResourceState.IN_USE, claimed_alice.lease_token, until)
    assert (row.failure_count, row.last_failure_reason) == (1, "timeout")
    assert kinds(row) == [EventKind.CLAIMED, EventKind.HELD_FOR_RETRY]


def test_a_non_retryable_failure_cannot_hold_its_resource(claimed_alice):
    from resources.classification import classify

    with pytest.raises(IllegalTransition, match="non-retryable failure cannot hold"):
        services.hold_after_failure(resource=claimed_alice, lease_token=claimed_alice.lease_token, error="banned",
                                    classification=classify("banned"), hold_until=timezone.now())


def test_a_probe_claim_before_the_cooldown_ends_is_refused(claimed_alice):
    from resources.classification import classify

    services.release(resource=claimed_alice, lease_token=claimed_alice.lease_token, outcome="failure",
                     error="risk control", classification=classify("banned"), probation_seconds=600)
    with pytest.raises(IllegalTransition, match="account alice@x is not due for a probe: it is quarantined, probe after"):
        services.claim_for_probe(resource=claimed_alice, holder="probe")
    assert fresh(claimed_alice).state == ResourceState.QUARANTINED


def test_unquarantine_ends_probation(claimed_alice):
    from resources.classification import classify

    services.release(resource=claimed_alice, lease_token=claimed_alice.lease_token, outcome="failure",
                     error="risk control", classification=classify("banned"), probation_seconds=600)
    services.unquarantine(resource=claimed_alice, actor="ops")
    row = fresh(claimed_alice)
    assert (row.probe_after, row.probation_cooldown_seconds) == (None, 0)


def test_add_resources_names_keys_already_in_the_pool(alice):
    with pytest.raises(ValueError, match="pool accounts already has alice@x; keys given twice: new@x"):
        services.add_resources(pool="accounts", resources=[{"key": "alice@x"}, {"key": "new@x"}, {"key": "new@x"}])
    assert Resource.objects.filter(pool=alice.pool).count() == 1


# a strict claim whose resource frees up while the failed claim is being explained


def _claims_of(holder):
    """Whether a statement is a claim for `holder` (the claim statements carry the holder as a parameter)."""
    return lambda params: isinstance(params, dict) and params.get("holder") == holder


def test_strict_claim_takes_a_resource_released_between_its_failed_claim_and_the_explanation(claimed_alice):
    from django.db import connection

    is_claim = _claims_of("task 900")
    released = []

    def release_right_after_the_failed_claim(execute, sql_text, params, many, context):
        result = execute(sql_text, params, many, context)
        if is_claim(params) and not released:
            released.append(True)
            services.release(resource=claimed_alice, lease_token=claimed_alice.lease_token, outcome="success")
        return result

    with connection.execute_wrapper(release_right_after_the_failed_claim):
        claimed = services.claim_by_id(resource_id=claimed_alice.pk, holder="task 900")
    assert released
    row = fresh(claimed)
    assert (row.state, row.lease_holder, row.lease_token) == (ResourceState.IN_USE, "task 900", claimed.lease_token)


def test_strict_claim_that_loses_the_race_twice_reports_in_use_never_available(claimed_alice):
    from django.db import connection

    is_claim = _claims_of("task 900")
    claims, leases = [], [claimed_alice]

    def free_it_after_each_failed_claim(execute, sql_text, params, many, context):
        if not is_claim(params):
            return execute(sql_text, params, many, context)
        claims.append(True)
        if len(claims) == 2:  # the retry: another claimer takes it first, and frees it again after
            leases.append(services.claim_by_id(resource_id=claimed_alice.pk, holder="task 901"))
        result = execute(sql_text, params, many, context)
        lease = leases.pop()
        services.release(resource=lease, lease_token=lease.lease_token, outcome="success")
        return result

    with connection.execute_wrapper(free_it_after_each_failed_claim), pytest.raises(ResourceUnavailable) as caught:
        services.claim_by_id(resource_id=claimed_alice.pk, holder="task 900")
    assert (caught.value.reason, caught.value.details["reason"]) == ("in_use", "in_use")
    assert fresh(claimed_alice).state == ResourceState.AVAILABLE


# probes


def probe_lease(resource, *, cooldown=600):
    """A probe's lease on `resource`: claimed, failed for good with probation, cooldown over, probe claimed."""
    from resources.classification import classify

    lease = services.claim_by_id(resource_id=resource.pk, holder="task 1")
    services.release(resource=resource, lease_token=lease.lease_token, outcome="failure", error="risk control",
                     classification=classify("banned"), probation_seconds=cooldown)
    Resource.objects.filter(pk=resource.pk).update(probe_after=timezone.now())
    return services.claim_for_probe(resource=resource, holder="probe task 2")


def test_successful_probe_consumes_the_resource_when_the_pool_says_so(db):
    coupon = ResourceFactory(pool=ResourcePoolFactory(name="coupons", resource_noun="coupon", consume_on_success=True))
    lease = probe_lease(coupon)
    ended = services.end_probe(resource=coupon, lease_token=lease.lease_token, succeeded=True)
    row = fresh(ended)
    assert (row.state, row.success_count, row.quarantine_reason) == (ResourceState.DONE, 1, "")


def test_successful_probe_returns_the_resource_to_a_pool_that_keeps_them(alice):
    lease = probe_lease(alice)
    services.end_probe(resource=alice, lease_token=lease.lease_token, succeeded=True)
    row = fresh(alice)
    assert (row.state, row.success_count, row.consecutive_failures) == (ResourceState.AVAILABLE, 1, 0)


def test_a_stale_probe_failing_on_a_resource_no_longer_quarantined_records_an_ordinary_failure(alice):
    probe = probe_lease(alice)
    services.sweep_expired_leases(now=timezone.now() + timedelta(hours=1))
    services.unquarantine(resource=alice, actor="ops", reason="fixed upstream")
    plain = services.claim_by_id(resource_id=alice.pk, holder="probe task 2")  # the old probe, claiming again
    assert plain.lease_token != probe.lease_token
    failures = fresh(alice).failure_count
    services.end_probe(resource=alice, lease_token=plain.lease_token, succeeded=False, error="TimeoutError: slow")
    row = fresh(alice)
    assert (row.state, row.failure_count, row.last_failure_reason) == (
        ResourceState.FAILED, failures + 1, "TimeoutError: slow")
    assert kinds(row)[-1] == EventKind.RELEASED_FAILURE


def test_postponing_the_probe_of_a_resource_already_on_probe_changes_nothing(alice):
    probe = probe_lease(alice)
    events = kinds(fresh(alice))

    services.postpone_probe(resource=alice, actor="probation", reason="no probe could start: flow gone")

    row = fresh(alice)
    assert (row.state, row.lease_token, row.probe_after) == (ResourceState.IN_USE, probe.lease_token, None)
    assert kinds(row) == events


# the sweeper counts failures of leases that were used, and only those


def test_sweeping_a_lease_held_for_a_retry_counts_its_failure_once(claimed_alice):
    from resources.classification import classify

    services.hold_after_failure(resource=claimed_alice, lease_token=claimed_alice.lease_token, error="timeout",
                                classification=classify("timeout"), hold_until=timezone.now(), actor="task 812")
    services.sweep_expired_leases(now=timezone.now() + timedelta(hours=1))
    row = fresh(claimed_alice)
    assert (row.state, row.failure_count, row.consecutive_failures) == (ResourceState.FAILED, 1, 1)
    assert row.last_failure_reason == "timeout"


def test_sweeping_a_probe_lease_before_its_probe_ran_counts_nothing_and_keeps_the_quarantine(alice):
    probe_lease(alice)
    before = fresh(alice)
    services.sweep_expired_leases(now=timezone.now() + timedelta(hours=1))
    row = fresh(alice)
    assert row.state == ResourceState.QUARANTINED and row.probe_after is not None
    assert (row.failure_count, row.consecutive_failures) == (before.failure_count, before.consecutive_failures)


def test_sweeping_an_unused_reservation_counts_nothing_and_frees_the_resource(alice):
    services.claim_by_id(resource_id=alice.pk, holder="task 3", reserve=True)
    services.sweep_expired_leases(now=timezone.now() + timedelta(hours=1))
    row = fresh(alice)
    assert (row.state, row.failure_count, row.consecutive_failures) == (ResourceState.AVAILABLE, 0, 0)
    event = ResourceEvent.objects.filter(resource=row).order_by("id").last()
    assert (event.kind, event.details["used"]) == (EventKind.LEASE_EXPIRED, False)


def test_a_reservation_put_to_use_counts_a_failure_when_swept(alice):
    lease = services.claim_by_id(resource_id=alice.pk, holder="task 3", reserve=True)
    services.extend_lease(resource=alice, lease_token=lease.lease_token, use=True)  # its attempt started
    [swept] = services.sweep_expired_leases(now=timezone.now() + timedelta(hours=1))
    row = fresh(alice)
    assert (row.state, row.failure_count, row.last_failure_reason) == (ResourceState.FAILED, 1, "lease expired")
    assert (swept.used, swept.lease_kind) == (True, "use")


def test_a_claim_by_an_external_holder_is_a_use(alice):
    assert services.claim_next(pool="accounts", holder="script").lease_kind == "use"


# bad input (past a rule: a lease's length, a limit) is answered with a DomainError carrying code
# bad_input and the field; types and storability are the interfaces' (tests/resources/api)


@contextmanager
def bad_input(field):
    """pytest.raises for a DomainError with code bad_input naming `field`."""
    with pytest.raises(DomainError) as caught:
        yield
    assert (caught.value.code, caught.value.details.get("field")) == ("bad_input", field)


def test_a_lease_past_the_column_range_is_bad_input(alice):
    with bad_input("lease_seconds"):
        services.claim_by_id(resource_id=alice.pk, holder="task 1", lease_seconds=2**31)
    assert fresh(alice).state == ResourceState.AVAILABLE


def test_a_taken_pool_name_is_refused_as_name_taken(pool):
    with pytest.raises(DomainError) as refused:
        services.create_pool(name="accounts")
    assert (refused.value.code, refused.value.details["field"]) == ("name_taken", "name")


def test_a_pool_lease_past_the_column_range_is_bad_input(db):
    with bad_input("lease_seconds"):
        services.create_pool(name="big", lease_seconds=2**31)


def test_a_sweep_limit_below_one_is_bad_input(db):
    with bad_input("limit"):
        services.sweep_expired_leases(limit=-1)


def test_a_failure_whose_error_text_holds_a_nul_character_is_still_recorded(claimed_alice):
    services.release(resource=claimed_alice, lease_token=claimed_alice.lease_token, outcome="failure",
                     error="TimeoutError: bad\x00byte")
    row = fresh(claimed_alice)
    assert (row.state, row.last_failure_reason) == (ResourceState.FAILED, "TimeoutError: bad\ufffdbyte")


# two creators at once


def _wait_until_blocked_on_a_lock(thread):
    """Poll pg_stat_activity until another backend of this database waits on a lock, or `thread` ended."""
    import time

    from django.db import connections

    deadline = time.monotonic() + 10
    with connections["default"].cursor() as cursor:
        while time.monotonic() < deadline and thread.is_alive():
            # Inside a transaction the statistics views keep their first snapshot unless cleared.
            cursor.execute("SELECT pg_stat_clear_snapshot()")
            cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                           " AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()")
            if cursor.fetchone()[0]:
                return
            time.sleep(0.01)


def _second_creator_while_the_first_is_uncommitted(first, second):
    """Run `first` in an open transaction, start `second` in a thread (its own connection), wait until
    it blocks on the first's uncommitted row, commit, and return what the second raised."""
    import threading

    from django.db import connections

    raised = []

    def run_second():
        try:
            second()
        except Exception as exc:  # noqa: BLE001 - handed to the test to check
            raised.append(exc)
        finally:
            connections.close_all()

    thread = threading.Thread(target=run_second)
    with transaction.atomic():
        first()
        thread.start()
        _wait_until_blocked_on_a_lock(thread)
    thread.join(10)
    return raised


@pytest.mark.django_db(transaction=True)
def test_two_creates_of_one_pool_at_once_give_the_loser_a_clear_error():
    raised = _second_creator_while_the_first_is_uncommitted(
        lambda: services.create_pool(name="twins"), lambda: services.create_pool(name="twins"))
    assert [(getattr(e, "code", repr(e)), getattr(e, "details", {}).get("field")) for e in raised] == [
        ("name_taken", "name")]


@pytest.mark.django_db(transaction=True)
def test_two_adds_of_one_key_at_once_give_the_loser_a_clear_error():
    pool = ResourcePoolFactory(name="shared")
    raised = _second_creator_while_the_first_is_uncommitted(
        lambda: services.add_resources(pool=pool, resources=[{"key": "k1"}]),
        lambda: services.add_resources(pool=pool, resources=[{"key": "k1"}]))
    assert [(getattr(e, "code", repr(e)), getattr(e, "details", {}).get("field")) for e in raised] == [
        ("key_taken", "key")]
    assert Resource.objects.filter(pool=pool).count() == 1


# operator edits of a resource or a pool: only the fields given, under the row's lock


def test_a_resource_change_keeps_a_lease_taken_before_it(claimed_alice):
    services.change_resource(resource=claimed_alice.pk, actor="carol", attributes={"region": "eu"})

    row = fresh(claimed_alice)
    assert (row.state, row.lease_token, row.attributes) == (
        ResourceState.IN_USE, claimed_alice.lease_token, {"region": "eu"})


def test_a_pool_change_leaves_the_fields_it_was_not_given(pool):
    ResourcePool.objects.filter(pk=pool.pk).update(description="EU accounts")  # after `pool` was read

    changed = services.change_pool(pool=pool, actor="carol", lease_seconds=900)

    row = ResourcePool.objects.get(pk=pool.pk)
    assert (row.lease_seconds, row.description) == (900, "EU accounts") == (changed.lease_seconds, changed.description)


def test_a_pool_change_to_a_taken_name_is_refused_as_name_taken_naming_the_field(pool):
    services.create_pool(name="keys")
    with pytest.raises(DomainError) as refused:
        services.change_pool(pool=pool, actor="carol", name="keys")
    assert (refused.value.code, refused.value.details["field"]) == ("name_taken", "name")
    assert ResourcePool.objects.get(pk=pool.pk).name == "accounts"


# lone surrogates: Python holds them, UTF-8 (and so PostgreSQL) cannot: a flow's error is stored
# cleaned; a name looked up is refused (resources.selectors)


def test_a_failure_whose_error_text_holds_a_lone_surrogate_is_still_recorded(claimed_alice):
    services.release(resource=claimed_alice, lease_token=claimed_alice.lease_token, outcome="failure",
                     error="TimeoutError: bad\ud800byte")
    row = fresh(claimed_alice)
    assert (row.state, row.last_failure_reason) == (ResourceState.FAILED, "TimeoutError: bad\ufffdbyte")


@pytest.mark.parametrize("name", ["acc\x00ounts", "acc\ud800ounts"])
def test_a_pool_name_no_column_can_hold_is_bad_input(pool, name):
    with bad_input("pool"):
        services.claim_next(pool=name, holder="task 1")


@pytest.mark.parametrize("key", ["alice\x00", "alice\ud800"])
def test_a_resource_key_no_column_can_hold_is_bad_input(alice, key):
    with bad_input("key"):
        services.claim_by_id(pool="accounts", key=key, holder="task 1")


# ids


@pytest.mark.parametrize("value", ["abc", True, 1.5, 2**70, 0, -1])
def test_a_resource_id_that_names_no_row_is_bad_input(alice, value):
    with bad_input("resource"):
        services.reset(resource=value, actor="ops")


def test_lock_resource_of_a_missing_resource_names_it(alice):
    from resources.errors import ResourceNotFound

    with transaction.atomic(), pytest.raises(ResourceNotFound, match=f"no resource with id {alice.pk + 1000}"):
        services.lock_resource(alice.pk + 1000)


def test_lock_resource_returns_the_row_with_its_pool(alice):
    with transaction.atomic():
        locked = services.lock_resource(alice.pk)
    assert (locked.pk, locked.pool.name) == (alice.pk, "accounts")


@pytest.mark.parametrize("ask", [
    lambda pool, alice: services.claim_next(pool=pool.pk, holder="w", lease_seconds=86_401),
    lambda pool, alice: services.claim_by_id(resource_id=alice.pk, holder="w", lease_seconds=86_401),
    lambda pool, alice: services.create_pool(name="numbers", lease_seconds=86_401, actor="carol"),
], ids=["claim_next", "claim_by_id", "create_pool"])
def test_a_lease_longer_than_the_longest_allowed_is_bad_input(pool, alice, ask):
    with pytest.raises(BadInput) as refused:
        ask(pool, alice)
    assert refused.value.field == "lease_seconds"
    assert Resource.objects.get(pk=alice.pk).state == ResourceState.AVAILABLE


def test_a_heartbeat_cannot_push_a_lease_past_the_longest_allowed(alice, settings):
    settings.RETRYOPS_MAX_LEASE_SECONDS = 600
    lease = services.claim_by_id(resource_id=alice.pk, holder="w")
    with pytest.raises(BadInput) as refused:
        services.extend_lease(resource=alice.pk, lease_token=lease.lease_token, seconds=601)
    assert refused.value.field == "seconds"
    assert services.extend_lease(resource=alice.pk, lease_token=lease.lease_token, seconds=600).leased_until


def test_claim_next_by_a_pool_name_with_a_nul_is_bad_input_naming_the_pool(db):
    with pytest.raises(BadInput) as refused:
        services.claim_next(pool="acc\x00ounts", holder="w")
    assert refused.value.field == "pool"
