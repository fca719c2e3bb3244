"""Which errors are really transient (scheduling.analysis): a history run through the real
services, attempt by attempt in the test's process, and the rows a hand count of it gives."""

from datetime import timedelta

import pytest
from django.utils import timezone

from scheduling import services
from scheduling.analysis import Hint, transient_errors, window_days
from scheduling.choices import PatternAction, TaskState
from retryops.errors import BadInput
from scheduling.models import Attempt, Task
from tests.factories import (
    AttemptFactory,
    ResourceFactory,
    RetryPolicyFactory,
    TaskFactory,
)

pytestmark = pytest.mark.django_db

SLOW = "TimeoutError: upstream slow"
PROXY = "ConnectionError: proxy refused"
BANNED = "PermissionError: account banned"


@pytest.fixture
def analysed(db):
    """Three attempts, at once; its own patterns for the three errors of the history."""
    return RetryPolicyFactory(
        name="analysed", max_attempts=3, initial_delay_seconds=0,
        retryable_error_patterns=[{"pattern": "proxy refused", "action": "retry_other_resource", "probation": False},
                                  {"pattern": "upstream slow", "action": "retry_same_resource", "probation": False}],
        non_retryable_error_patterns=[{"pattern": "account banned", "action": "quarantine", "probation": False}])


def start(pool, policy, resource=None, n=[0], **kwargs):
    n[0] += 1
    return services.start_task(flow="demo", pool_name=pool, payload={"order": n[0]}, resource=resource,
                               created_by="shop", policy=policy, **kwargs)


def run(task: Task, error: BaseException | None = None) -> Task:
    """One attempt of `task` as a worker runs it, failing with `error` or succeeding."""
    number = Task.objects.get(pk=task.pk).attempt_count + 1
    started = services.begin_attempt(task_id=task.pk, attempt_number=number)
    assert started is not None, f"attempt {number} of {task} did not start"
    services.finish_attempt(attempt=started.attempt, error=error, result=None if error else {"ok": True})
    return Task.objects.get(pk=task.pk)


def slow():
    return TimeoutError("upstream slow")


@pytest.fixture
def history(pool, analysed):
    """By hand:
    t1 on alice: slow, then ok on alice                 1 failure, 1 retry, recovered on the same resource
    t2 on carl: slow, slow, slow: dead                  3 failures, 2 retries (both wasted), 3 dead
    t4 on dora: banned: quarantined, dead; an operator
       runs it again on alice (below): ok               1 failure, no retry, 1 dead, recovered on another
    t3 on alice, not strict: proxy refused, then ok on
       bob (the only resource left available)          1 failure, 1 retry, recovered on another resource
    """
    alice, bob, carl, dora = (ResourceFactory(pool=pool, key=key) for key in ("alice@x", "bob@x", "carl@x", "dora@x"))
    t1 = run(run(start(pool, analysed, alice), slow()))
    t2 = run(run(run(start(pool, analysed, carl), slow()), slow()), slow())
    t4 = run(start(pool, analysed, dora), PermissionError("account banned"))
    t3 = run(run(start(pool, analysed, alice, strict=False), ConnectionError("proxy refused")))
    assert list(t3.attempts.values_list("resource__key", flat=True)) == ["alice@x", "bob@x"]
    rerun = run(services.retry_resource(resource=alice, actor="ops", instance=t4))
    assert [Task.objects.get(pk=t.pk).state for t in (t1, t2, t3, t4, rerun)] == [
        TaskState.SUCCEEDED, TaskState.DEAD, TaskState.SUCCEEDED, TaskState.DEAD, TaskState.SUCCEEDED]
    assert (rerun.first_run_id, rerun.resource_id) == (t4.pk, alice.pk)
    return {"alice": alice, "bob": bob, "t2": t2}


def counts(row) -> tuple:
    return (row.signature, row.failures, row.retries, row.wasted, row.dead, row.recovered_same, row.recovered_other)


def test_a_hand_built_history_gives_the_hand_counted_rows_most_wasted_first(history, analysed):
    report = transient_errors(policy=analysed)
    assert [counts(row) for row in report.rows] == [
        (SLOW, 4, 3, 2, 3, 1, 0),
        (PROXY, 1, 1, 0, 0, 0, 1),
        (BANNED, 1, 0, 0, 1, 0, 1),
    ]
    assert report.more is False


def test_each_row_names_the_policy_pattern_and_action_that_matched_it(history, analysed):
    rows = {row.signature: row for row in transient_errors(policy=analysed).rows}
    assert [(rows[s].verdict.classification.pattern, rows[s].pattern_source, rows[s].verdict.action)
            for s in (SLOW, PROXY, BANNED)] == [
        ("upstream slow", "policy", PatternAction.RETRY_SAME_RESOURCE),
        ("proxy refused", "policy", PatternAction.RETRY_OTHER_RESOURCE),
        ("account banned", "policy", PatternAction.QUARANTINE),
    ]
    assert rows[BANNED].recorded_action == PatternAction.QUARANTINE


def test_a_stopped_signature_that_another_resource_then_ran_is_one_to_loosen(history, analysed):
    rows = {row.signature: row.hint for row in transient_errors(policy=analysed).rows}
    assert rows == {SLOW: "", PROXY: "", BANNED: Hint.LOOSEN}


def test_a_signature_retried_in_vain_is_one_to_tighten_and_a_builtin_pattern_is_named(pool, alice):
    plain = RetryPolicyFactory(name="plain", max_attempts=2, initial_delay_seconds=0)
    run(run(start(pool, plain, alice), TimeoutError("upstream timed out after 30s")),
        TimeoutError("upstream timed out after 31s"))
    [row] = transient_errors(policy=plain).rows
    assert (row.signature, row.failures, row.retries, row.wasted) == ("TimeoutError: upstream timed out after <n>s",
                                                                     2, 1, 1)
    assert (row.hint, row.pattern_source, row.verdict.classification.pattern) == (
        Hint.TIGHTEN, "builtin", r"time(d)?[ _-]?out")
    assert row.example == "TimeoutError: upstream timed out after 31s"  # the latest failure's text


def test_the_pattern_shown_is_the_policy_as_it_is_now_beside_the_recorded_action(history, analysed):
    analysed.non_retryable_error_patterns = [{"pattern": "upstream slow", "action": "dead_letter", "probation": False}]
    analysed.save(update_fields=["non_retryable_error_patterns"])
    row = transient_errors(policy=analysed).rows[0]
    assert (row.signature, row.verdict.action, row.recorded_action) == (
        SLOW, PatternAction.DEAD_LETTER, PatternAction.RETRY_SAME_RESOURCE)


def test_failures_before_the_window_are_left_out(history, analysed):
    Attempt.objects.filter(task=history["t2"]).update(started_at=timezone.now() - timedelta(days=8))
    def slow_row(days):
        return next(counts(row) for row in transient_errors(policy=analysed, days=days).rows if row.signature == SLOW)

    assert slow_row(7) == (SLOW, 1, 1, 0, 0, 1, 0)
    assert slow_row(30) == (SLOW, 4, 3, 2, 3, 1, 0)


def test_one_policy_shows_only_its_tasks_and_every_policy_shows_each_by_policy(history, analysed, pool):
    other = RetryPolicyFactory(name="other", max_attempts=1)
    run(start(pool, other, history["bob"]), slow())
    assert [row.signature for row in transient_errors(policy=other).rows] == [SLOW]
    assert [(row.policy.name, row.signature, row.failures) for row in transient_errors().rows] == [
        ("analysed", SLOW, 4), ("analysed", PROXY, 1), ("analysed", BANNED, 1), ("other", SLOW, 1)]


def test_rows_past_the_limit_are_left_out_and_said_to_be(history, analysed):
    report = transient_errors(policy=analysed, limit=2)
    assert ([row.signature for row in report.rows], report.more) == ([SLOW, PROXY], True)


@pytest.mark.parametrize("days", ["0", "91", "seven", 7.5, True, -1, "9" * 30, "\x00"])
def test_a_window_that_is_not_a_whole_number_of_days_from_1_to_90_is_refused_naming_days(days):
    with pytest.raises(BadInput) as refused:
        window_days(days)
    assert refused.value.details == {"field": "days"}


def test_the_window_defaults_to_the_setting(settings):
    settings.RETRYOPS_TRANSIENCE_WINDOW_DAYS = 3
    assert (window_days(), window_days(""), window_days("30")) == (3, 3, 30)


def recovered_elsewhere(pool, policy):
    """A task that failed on alice, its retry kept there by the policy, yet it succeeded on bob
    (alice's hold was swept meanwhile): built row by row."""
    alice, bob = ResourceFactory(pool=pool, key="alice@x"), ResourceFactory(pool=pool, key="bob@x")
    now = timezone.now()
    task = TaskFactory(pool=pool, policy=policy, state=TaskState.SUCCEEDED, next_run_at=None, finished_at=now,
                       attempt_count=2, resource=bob)
    AttemptFactory(task=task, number=1, resource=alice, outcome="failed", finished_at=now, error_class="TimeoutError",
                   error_message="upstream slow", error_signature=SLOW, category="retryable",
                   action=PatternAction.RETRY_SAME_RESOURCE)
    AttemptFactory(task=task, number=2, resource=bob, outcome="succeeded", finished_at=now)


def test_a_signature_kept_on_its_resource_that_recovers_elsewhere_is_one_to_move(pool, analysed):
    recovered_elsewhere(pool, analysed)
    [row] = transient_errors(policy=analysed).rows
    assert (counts(row), row.hint) == ((SLOW, 1, 1, 0, 0, 0, 1), Hint.MOVE)


def test_no_move_is_suggested_where_the_policy_moves_every_retry_already(pool, analysed):
    analysed.same_resource_on_retry = False
    analysed.save(update_fields=["same_resource_on_retry"])
    recovered_elsewhere(pool, analysed)
    assert [row.hint for row in transient_errors(policy=analysed).rows] == [""]
