"""The failure rollup (scheduling.services.rollups) and the transience report read through it
(scheduling.analysis.failure_counts): on the same rows, the rollup path gives what counting every
failure of the window gives, before a pass, after it, and after changes that reach old failures.
Transactional: the rollup's mark is a transaction id, which only committed rows pass."""

import threading
import time
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.db.models import Count, F, Sum
from django.utils import timezone

import resources.services
from scheduling import services
from scheduling.analysis import failure_counts, transient_errors
from scheduling.selectors import (
    RETRY_OUTCOMES,
    _retry_outcome_events,
    retry_outcomes,
    retry_start_counts,
    retry_starts,
    started_late,
)
from scheduling.choices import AttemptOutcome, TaskState
from scheduling.models import Attempt, AttemptRollupMark, FailureRollup, RetryRollup, Task, TaskEvent
from scheduling.services.rollups import roll_up_attempts
from scheduling.watermark import day_floor
from tests.factories import ResourceFactory, RetryPolicyFactory
from tests.scheduling.test_analysis import run, slow, start

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def policies(db):
    retrying = RetryPolicyFactory(
        name="retrying", max_attempts=3, initial_delay_seconds=0,
        retryable_error_patterns=[{"pattern": "upstream slow", "action": "retry_same_resource", "probation": False}],
        non_retryable_error_patterns=[{"pattern": "account banned", "action": "quarantine", "probation": False}])
    return retrying, RetryPolicyFactory(name="once", max_attempts=1)


def ago(task: Task, **delta) -> Task:
    """Move the task's attempts and events back in time (the rollups key them by their times)."""
    back = timedelta(**delta)
    Attempt.objects.filter(task=task).update(started_at=F("started_at") - back, finished_at=F("finished_at") - back,
                                             scheduled_for=F("scheduled_for") - back)
    TaskEvent.objects.filter(task=task).update(created_at=F("created_at") - back)
    return task


@pytest.fixture
def spread(pool, policies):
    """Failures over a month: now, hours ago, days ago and 20 days ago, of two policies; one task
    waits for a retry, one died on a resource that a later run can still succeed on."""
    retrying, once = policies
    alice, bob, carl = (ResourceFactory(pool=pool, key=key) for key in ("alice@x", "bob@x", "carl@x"))
    run(run(start(pool, retrying, alice), slow()))                                    # recovered, now
    ago(run(run(run(start(pool, retrying, carl), slow()), slow()), slow()), hours=5)  # dead, 5 hours ago
    banned = ago(run(start(pool, retrying, bob), PermissionError("account banned")), days=3, hours=2)
    ago(run(start(pool, once, alice), slow()), days=20)                               # dead, other policy
    waiting = ago(run(start(pool, retrying, carl, strict=False), slow()), minutes=90)  # waits for its retry
    return {"banned": banned, "waiting": waiting, "alice": alice}


def settled(timeout: float = 120.0) -> None:
    """Wait until every transaction begun so far has ended (pg_snapshot_xmin passed them), so that a
    pass can roll up what the test wrote: a transaction left open on the server, in any database,
    holds the rollup back (as the metrics rollup), and a busy shared server has such."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_current_xact_id()::text")
        written = int(cursor.fetchone()[0])
    deadline = time.monotonic() + timeout
    while True:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_snapshot_xmin(pg_current_snapshot())::text")
            if int(cursor.fetchone()[0]) > written:
                return
        assert time.monotonic() < deadline, "a transaction left open on the server holds pg_snapshot_xmin back"
        time.sleep(0.2)


def roll_up():
    settled()
    return roll_up_attempts()


def windows(now):
    return [(now - timedelta(days=days), now, policy) for days in (1, 7, 30) for policy in (None, *policy_ids())]


def policy_ids():
    return list(FailureRollup.objects.order_by().values_list("policy_id", flat=True).distinct()) or [None]


def assert_rollup_equals_raw(now=None):
    now = now or timezone.now()
    for since, until, policy in windows(now):
        rolled = failure_counts(since=since, until=until, policy_id=policy)
        assert rolled == failure_counts(since=since, until=until, policy_id=policy, rolled_up=False), (since, policy)


def test_the_first_pass_rolls_up_every_kept_hour_and_reads_equal_the_raw_count(spread):
    done = roll_up()
    assert (done.skipped, done.full) == (False, True)
    assert FailureRollup.objects.filter(period_hours=1).count() == 5  # 5 hours with failures of one signature each
    assert_rollup_equals_raw()


def test_a_day_is_the_sum_of_its_hours(spread):
    roll_up()
    days = FailureRollup.objects.filter(period_hours=24)
    hours = FailureRollup.objects.filter(period_hours=1)
    assert days.aggregate(n=Sum("failures"))["n"] == hours.aggregate(n=Sum("failures"))["n"] > 0
    for day in days:
        hours = FailureRollup.objects.filter(period_hours=1, policy_id=day.policy_id, signature=day.signature,
                                             period_start__gte=day.period_start,
                                             period_start__lt=day.period_start + timedelta(days=1))
        assert hours.aggregate(n=Sum("failures"))["n"] == day.failures


def test_changes_after_a_pass_that_reach_old_failures_are_counted_before_and_after_the_next_pass(spread):
    roll_up()
    # A failure of 3 days ago recovers: its dead task's business instance runs again and succeeds.
    rerun = run(services.retry_resource(resource=spread["alice"], actor="ops", instance=spread["banned"]))
    assert rerun.state == TaskState.SUCCEEDED
    # A task waiting since 90 minutes ago fails again and dies.
    run(spread["waiting"], slow())
    run(spread["waiting"], slow())
    assert Task.objects.get(pk=spread["waiting"].pk).state == TaskState.DEAD
    assert_rollup_equals_raw()  # the changed hours read from the attempts
    done = roll_up()
    assert (done.full, done.hours >= 2) == (False, True)
    assert_rollup_equals_raw()  # now from the rollup
    banned_hour = FailureRollup.objects.get(period_hours=1, signature__startswith="PermissionError")
    assert (banned_hour.dead, banned_hour.recovered_other) == (1, 1)


def test_a_read_takes_whole_hours_from_the_rollup_and_the_cut_ends_from_the_attempts(spread, policies):
    roll_up()
    now = timezone.now()
    hour = FailureRollup.objects.filter(period_hours=1, period_start__lt=now - timedelta(hours=2)).order_by(
        "-period_start").first()
    FailureRollup.objects.filter(period_hours=1, pk=hour.pk).update(failures=F("failures") + 1000)
    [row] = [r for r in failure_counts(since=now - timedelta(hours=30), until=now)
             if (r["policy_id"], r["signature"]) == (hour.policy_id, hour.signature)]
    raw = [r for r in failure_counts(since=now - timedelta(hours=30), until=now, rolled_up=False)
           if (r["policy_id"], r["signature"]) == (hour.policy_id, hour.signature)]
    assert row["failures"] == raw[0]["failures"] + 1000


def test_the_report_reads_the_same_rows_with_or_without_a_pass(spread, policies):
    before = [(r.policy.name, r.signature, r.failures, r.wasted, r.recovered) for r in transient_errors(days=30).rows]
    roll_up()
    after = [(r.policy.name, r.signature, r.failures, r.wasted, r.recovered) for r in transient_errors(days=30).rows]
    assert before == after and len(before) == 3


def test_a_pass_drops_periods_older_than_the_longest_window(spread):
    roll_up()
    FailureRollup.objects.update(period_start=F("period_start") - timedelta(days=200))
    roll_up()
    assert not FailureRollup.objects.filter(period_start__lt=AttemptRollupMark.objects.get().kept_from).exists()


def raw_retry_figures(since, until) -> tuple:
    """The retry figures counted from every row of the window (the selectors' own querysets)."""
    ended = dict.fromkeys(RETRY_OUTCOMES.values(), 0)
    for kind, n in _retry_outcome_events(since=since, until=until).values_list("kind").annotate(n=Count("*")).order_by():
        ended[RETRY_OUTCOMES[kind]] = n
    started = retry_starts(since=since, until=until).aggregate(started=Count("*"),
                                                                late=Count("started_at", filter=started_late()))
    return ended, started


def assert_retry_figures_equal_raw():
    now = timezone.now()
    for since in (now - timedelta(hours=3), now - timedelta(days=1), now - timedelta(days=7), now - timedelta(days=30)):
        ended = retry_outcomes(since=since, until=now)
        assert (ended, retry_start_counts(since=since, until=now)) == raw_retry_figures(since, now), since


@pytest.fixture
def retried(spread, policies):
    """Retries that ended in whole hours, as many succeeded, failed and dead as none equals another:
    a figure counted under another's name cannot go unseen."""
    pool, alice = spread["alice"].pool, spread["alice"]
    for _ in range(2):
        ago(run(run(run(start(pool, policies[0], alice), slow()), slow())), hours=4)  # failed, then succeeded
    ago(run(run(run(start(pool, policies[0], alice), slow()), slow()), slow()), hours=4)  # failed, then dead
    now = timezone.now()
    ended = raw_retry_figures(now - timedelta(days=7), now)[0]
    assert len(set(ended.values())) == 3, ended
    return spread


def test_the_retry_figures_from_the_rollup_equal_the_rows_before_and_after_a_pass(retried):
    spread = retried
    assert_retry_figures_equal_raw()
    roll_up()
    assert RetryRollup.objects.aggregate(n=Sum("started"))["n"] == Attempt.objects.filter(number__gt=1).count()
    assert_retry_figures_equal_raw()
    run(spread["waiting"], slow())  # one more retry starts, fails and is retried: above the mark
    assert_retry_figures_equal_raw()
    roll_up()
    assert_retry_figures_equal_raw()


def test_lateness_counted_with_another_grace_is_counted_again(spread, settings):
    Attempt.objects.filter(number__gt=1).update(started_at=F("scheduled_for") + timedelta(seconds=20))
    roll_up()
    now = timezone.now()
    assert retry_start_counts(since=now - timedelta(days=7), until=now)["late"] == 0
    settings.RETRYOPS_RETRY_SLA_GRACE_SECONDS = 10
    started = Attempt.objects.filter(number__gt=1).count()
    assert retry_start_counts(since=now - timedelta(days=7), until=now) == {"started": started, "late": started}
    roll_up()
    assert RetryRollup.objects.aggregate(n=Sum("late"))["n"] == started
    assert_retry_figures_equal_raw()


def test_an_abandoned_failure_whose_late_success_is_kept_leaves_its_hour_in_neither_read(spread, policies):
    # An attempt given up as lost counts as a failure; its flow's success arriving afterwards (no
    # retry started yet) turns it into a success: the hour it started in must no longer count it.
    task = start(spread["alice"].pool, policies[0], spread["alice"])
    lost = services.begin_attempt(task_id=task.pk, attempt_number=1)
    resources.services.sweep_expired_leases(now=timezone.now() + timedelta(hours=1))
    resources.services.sweep_expired_leases(now=timezone.now() + timedelta(hours=2))
    services.recover_lost_attempts()
    ago(task, hours=7)
    roll_up()
    assert Attempt.objects.get(pk=lost.attempt.pk).outcome == AttemptOutcome.ABANDONED
    services.finish_attempt(attempt=lost.attempt, result={"late": True})
    assert Attempt.objects.get(pk=lost.attempt.pk).outcome == AttemptOutcome.SUCCEEDED
    assert_rollup_equals_raw()  # before the next pass
    roll_up()
    assert_rollup_equals_raw()  # and after it


def test_a_retry_figure_takes_the_whole_hours_from_the_rollup(retried):
    roll_up()
    now = timezone.now()
    before = retry_outcomes(since=now - timedelta(days=1), until=now)
    hour = RetryRollup.objects.filter(period_start__lt=now - timedelta(hours=2), succeeded__gt=0).first()
    RetryRollup.objects.filter(pk=hour.pk).update(succeeded=F("succeeded") + 1000)
    assert retry_outcomes(since=now - timedelta(days=1), until=now) == {**before, "succeeded": before["succeeded"] + 1000}


def test_a_pass_after_a_long_lag_counts_a_day_of_hours_per_statement(spread):
    # Each statement stays within the ops process's statement timeout however long the lag was.
    roll_up()
    AttemptRollupMark.objects.update(below_xid=0)  # as if every row were written since the last pass
    settled()
    with CaptureQueriesContext(connection) as queries:
        done = roll_up_attempts()
    hours = FailureRollup.objects.filter(period_hours=1).values_list("period_start", flat=True)
    days = {day_floor(hour) for hour in hours}
    counted = [q for q in queries.captured_queries if "scheduling_failurerollup" in q["sql"] and "date_trunc('hour'" in q["sql"]]
    assert (done.hours, len(counted)) == (len(hours), len(days)) and len(days) > 1
    assert_rollup_equals_raw()


def test_a_change_whose_transaction_is_open_across_a_pass_is_counted_once_it_commits(spread):
    roll_up()
    written, commit = threading.Event(), threading.Event()

    def change():
        try:
            with transaction.atomic():
                # The task of 90 minutes ago fails twice more and dies: its first failure's retry is
                # wasted now. Written, not committed.
                assert run(run(spread["waiting"], slow()), slow()).state == TaskState.DEAD
                written.set()
                assert commit.wait(30)
        finally:
            connection.close()

    worker = threading.Thread(target=change)
    worker.start()
    assert written.wait(30)
    done = roll_up_attempts()  # the open transaction holds the pass's horizon below it
    assert not done.skipped
    assert_rollup_equals_raw()
    commit.set()
    worker.join(30)
    assert Attempt.objects.filter(task=spread["waiting"]).count() == 3
    assert_rollup_equals_raw()  # above the mark: its hours read from the attempts
    roll_up()
    assert_rollup_equals_raw()
