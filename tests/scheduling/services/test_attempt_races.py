"""Races between a late success or the worker's lease renewal and what the task does meanwhile:
one side is held at the point of the race (a seam in the service, the only thing patched) while
the other runs into its lock, as two processes would."""

import threading
import time
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.utils import timezone

import resources.services
from resources.models import Resource
from scheduling import services
from scheduling.choices import TERMINAL_STATES, AttemptOutcome, TaskState
from scheduling.models import Attempt, Task
from scheduling.services import claims, operator_retry
from tests.factories import RetryPolicyFactory
from tests.scheduling.helpers import died_on, in_thread

pytestmark = pytest.mark.django_db(transaction=True)


def start(pool, **kwargs):
    kwargs.setdefault("policy", "instant")
    return services.start_task(flow="demo", pool_name=pool, payload={}, created_by="test", **kwargs)


def wait_for_lock_wait(seconds=10):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with connection.cursor() as c:
            c.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                      "AND datname = current_database()")
            if c.fetchone()[0]:
                return True
        time.sleep(0.02)
    return False


def test_a_late_success_racing_its_retrys_start_is_dropped_and_the_retry_runs(redis_conn, alice, instant_policy, monkeypatch):
    task = start(alice.pool)
    first = services.begin_attempt(task_id=task.pk, attempt_number=1)
    resources.services.sweep_expired_leases(now=timezone.now() + timedelta(hours=1))
    resources.services.sweep_expired_leases(now=timezone.now() + timedelta(hours=2))
    services.recover_lost_attempts()
    task.refresh_from_db()
    assert task.state == TaskState.RETRYING and task.attempt_count == 1

    # The retry's begin_attempt holds the task's lock (between its SELECT FOR UPDATE and commit)
    # while the late success's statement takes its snapshot.
    in_claim, go_on = threading.Event(), threading.Event()
    real_claim_for = claims.claim_for

    def slow_claim_for(t):
        in_claim.set()
        go_on.wait(10)
        return real_claim_for(t)

    monkeypatch.setattr("scheduling.services.attempts.claim_for", slow_claim_for)
    out = {}

    def retry():
        try:
            out["retry"] = services.begin_attempt(task_id=task.pk, attempt_number=2)
        finally:
            connection.close()

    def late():
        try:
            out["late"] = services.finish_attempt(attempt=first.attempt, result={"late": True})
        finally:
            connection.close()

    t1 = threading.Thread(target=retry)
    t1.start()
    assert in_claim.wait(10)
    t2 = threading.Thread(target=late)
    t2.start()
    assert wait_for_lock_wait()  # the success statement waits on the task row, its snapshot taken
    go_on.set()
    t1.join(20)
    t2.join(20)

    task.refresh_from_db()
    attempts = dict(Attempt.objects.filter(task=task).values_list("number", "outcome"))
    # The retry started first: the late success is dropped (and recorded), never kept beside it.
    assert out["late"].outcome == AttemptOutcome.ABANDONED
    assert out["retry"] is not None and attempts == {1: AttemptOutcome.ABANDONED, 2: AttemptOutcome.RUNNING}
    assert task.state == TaskState.RUNNING


def test_the_workers_renewal_racing_its_attempts_failure_leaves_the_hold_for_the_retry(redis_conn, alice, monkeypatch):
    RetryPolicyFactory(name="slow", max_attempts=3, initial_delay_seconds=1200, max_delay_seconds=1200)
    task = start(alice.pool, policy="slow")
    first = services.begin_attempt(task_id=task.pk, attempt_number=1)

    held, go_on = threading.Event(), threading.Event()
    real_hold = resources.services.hold_after_failure

    def slow_hold(**kw):
        r = real_hold(**kw)
        held.set()
        go_on.wait(10)
        return r

    monkeypatch.setattr(resources.services, "hold_after_failure", slow_hold)
    out = {}

    def fail():
        try:
            out["fail"] = services.finish_attempt(attempt=first.attempt, error=TimeoutError("upstream timeout"))
        finally:
            connection.close()

    def keep():
        try:
            from scheduling.services.attempts import keep_attempt_lease
            out["keep"] = keep_attempt_lease(task_id=task.pk, attempt_number=1, worker="", rq_job_id="")
        finally:
            connection.close()

    t1 = threading.Thread(target=fail)
    t1.start()
    assert held.wait(10), "no hold (verdict was not same-resource?)"
    t2 = threading.Thread(target=keep)
    t2.start()
    assert wait_for_lock_wait()
    go_on.set()
    t1.join(20)
    t2.join(20)
    task.refresh_from_db()
    res = Resource.objects.get(pk=alice.pk)
    assert task.state == TaskState.RETRYING and task.held_lease_token == res.lease_token
    assert out["keep"].state == "lost"  # the attempt's use of the lease is over: not renewed
    assert res.leased_until > task.next_run_at  # the hold lasts until the retry is due (and a lease more)


def test_two_new_instances_of_one_order_asked_at_once_from_two_instances_make_one_live_run(
        redis_conn, alice, bob, default_policy, monkeypatch):
    # Order 42 succeeded on alice, and so did a new instance of it on bob: the two requests lock
    # different first tasks, so only a lock on the order itself keeps them from both starting.
    order = died_on(alice, default_policy)
    Task.objects.filter(pk__in=[order.pk, died_on(bob, default_policy, new_instance_of=order).pk]).update(
        state=TaskState.SUCCEEDED)
    created, go_on, outcomes = threading.Event(), threading.Event(), {}
    real_start = operator_retry.start_retry

    def start_then_wait(**kwargs):
        task = real_start(**kwargs)
        if kwargs["resource"].pk == alice.pk:
            created.set()
            go_on.wait(10)  # written, not yet committed
        return task

    def ask(resource, actor):
        def request():
            try:
                outcomes[actor] = services.retry_resource(resource=resource.pk, actor=actor, as_new_instance=True).pk
            except Exception as exc:
                outcomes[actor] = getattr(exc, "code", repr(exc))
        return request

    monkeypatch.setattr(operator_retry, "start_retry", start_then_wait)
    first = in_thread(ask(alice, "ops:carol"))
    assert created.wait(10)
    second = in_thread(ask(bob, "ops:dave"))
    waited = wait_for_lock_wait(5)
    go_on.set()
    first.join(10)
    second.join(10)
    assert waited
    assert outcomes["ops:dave"] == "task_live"
    assert Task.objects.exclude(state__in=TERMINAL_STATES).filter(payload={"order": 42}).count() == 1


def lock_waiters() -> int:
    with connection.cursor() as c:
        c.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()")
        return c.fetchone()[0]


def racing_on_the_task_row(task_id: int, first, second) -> None:
    """Run `first`, then `second`, each on a connection of its own, both queued on the task's row
    lock (held meanwhile by a third transaction): PostgreSQL grants it to them in that order."""
    locked, release = threading.Event(), threading.Event()

    def hold():
        with transaction.atomic():
            Task.objects.select_for_update().filter(pk=task_id).first()
            locked.set()
            release.wait(20)

    holder = in_thread(hold)
    assert locked.wait(10)
    threads = []
    for waiters, work in enumerate((first, second), start=1):
        threads.append(in_thread(work))
        deadline = time.monotonic() + 10
        while lock_waiters() < waiters:
            assert time.monotonic() < deadline, "never waited on the task's row"
            time.sleep(0.02)
    release.set()
    for thread in (holder, *threads):
        thread.join(20)


@pytest.mark.parametrize("first_in", ["retry", "late success"])
def test_a_late_success_racing_its_retrys_one_statement_start_leaves_one_of_them(redis_conn, alice, bob,
                                                                                  first_in, monkeypatch):
    RetryPolicyFactory(name="elsewhere", max_attempts=3, initial_delay_seconds=0, same_resource_on_retry=False)
    task = start(alice.pool, policy="elsewhere")
    first = services.begin_attempt(task_id=task.pk, attempt_number=1)
    resources.services.sweep_expired_leases(now=timezone.now() + timedelta(hours=1))
    resources.services.sweep_expired_leases(now=timezone.now() + timedelta(hours=2))
    services.recover_lost_attempts()
    # Retried on any resource of the pool: its start is the one statement (lock, claim, attempt).
    assert Task.objects.filter(pk=task.pk, state=TaskState.RETRYING, pinned_resource=None).exists()
    monkeypatch.setattr("scheduling.services.attempts.claim_for", lambda t: pytest.fail("claimed in the transaction"))
    out = {}

    def retry():
        out["retry"] = services.begin_attempt(task_id=task.pk, attempt_number=2)

    def late():
        out["late"] = services.finish_attempt(attempt=first.attempt, result={"late": True})

    racing_on_the_task_row(task.pk, *((retry, late) if first_in == "retry" else (late, retry)))

    task.refresh_from_db()
    attempts = dict(Attempt.objects.filter(task=task).values_list("number", "outcome"))
    held = list(Resource.objects.filter(pool=alice.pool, state="in_use").values_list("lease_token", flat=True))
    if first_in == "retry":
        assert out["late"].outcome == AttemptOutcome.ABANDONED
        assert attempts == {1: AttemptOutcome.ABANDONED, 2: AttemptOutcome.RUNNING}
        assert task.state == TaskState.RUNNING and held == [out["retry"].attempt.lease_token]
    else:
        assert out["late"].outcome == AttemptOutcome.SUCCEEDED and out["retry"] is None
        assert attempts == {1: AttemptOutcome.SUCCEEDED}
        assert task.state == TaskState.SUCCEEDED and held == []


@pytest.mark.parametrize("first_in", ["transaction", "one statement"])
def test_two_deliveries_of_one_attempt_one_through_each_start_start_it_once(redis_conn, alice, bob, instant_policy,
                                                                           first_in):
    task = start(alice.pool)
    out = {}

    def in_transaction():  # a caller's transaction: begin_attempt takes its transaction's path
        with transaction.atomic():
            out["transaction"] = services.begin_attempt(task_id=task.pk, attempt_number=1, rq_job_id="a")

    def one_statement():
        out["one statement"] = services.begin_attempt(task_id=task.pk, attempt_number=1, rq_job_id="b")

    starts = {"transaction": in_transaction, "one statement": one_statement}
    racing_on_the_task_row(task.pk, starts[first_in], *(work for name, work in starts.items() if name != first_in))

    second_in = next(name for name in starts if name != first_in)
    assert out[first_in] is not None and out[second_in] is None
    assert Attempt.objects.filter(task=task).count() == 1
    held = list(Resource.objects.filter(pool=alice.pool, state="in_use").values_list("lease_token", flat=True))
    assert held == [out[first_in].attempt.lease_token]
