"""The policy what-if on a hand-built history (tests/scheduling/whatif_history.py): each count is
the one a hand calculation gives, written out beside it."""

import re
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from retryops.errors import DomainError
from scheduling.whatif import proposal, what_if
from tests.factories import ResourceFactory, RetryPolicyFactory
from tests.scheduling.whatif_history import (
    BANNED,
    TIMEOUT,
    build,
    checkout_policy,
    record,
)

pytestmark = pytest.mark.django_db

WRITE = re.compile(r"^\s*(INSERT|UPDATE|DELETE)\b", re.I)


def figures(replay) -> dict:
    return {key: round(figure.total, 6) for key, figure in vars(replay).items()}


def run(policy, **changes):
    return what_if(policy=policy.name, proposed=proposal(policy, changes))


@pytest.fixture
def policy():
    return checkout_policy()


@pytest.fixture
def history(pool, policy):
    return build(pool, policy)


# The history replayed under its own policy: what was recorded.
AS_RECORDED = {
    "retries_scheduled": 6,        # t1 1, t3 2, t5 2, t6 1
    "dead": 2, "dead_non_retryable": 1, "dead_max_attempts": 1, "dead_deadline": 0,  # t4; t3
    "recovered": 2,                # t1, t5
    "succeeded_first": 1,          # t2
    "cancelled": 1,                # t6
    "resources_quarantined": 1,    # t4's
}


def test_the_current_policy_replays_the_history_as_it_was_recorded(history, policy):
    result = run(policy)
    assert (result.tasks, figures(result.current), figures(result.proposed)) == (6, AS_RECORDED, AS_RECORDED)
    assert result.changes == {}


def test_fewer_max_attempts_kill_the_tasks_that_needed_a_third(history, policy):
    result = run(policy, max_attempts=2)
    assert figures(result.proposed) == {
        "retries_scheduled": 4,    # t1 1, t3 1 (its 2nd fails at the new maximum), t5 1, t6 1
        "dead": 3, "dead_non_retryable": 1, "dead_max_attempts": 2, "dead_deadline": 0,  # t4; t3, t5
        "recovered": 1,            # t1 only: t5 succeeded at attempt 3
        "succeeded_first": 1, "cancelled": 1, "resources_quarantined": 1,
    }
    assert result.changes == {"max_attempts": (3, 2)}


def test_a_timeout_made_non_retryable_kills_and_quarantines_at_the_first_failure(history, policy):
    result = run(policy, non_retryable_error_patterns=[{"pattern": "banned", "action": "quarantine"}, "timed out"])
    assert figures(result.proposed) == {
        "retries_scheduled": 0,
        "dead": 5, "dead_non_retryable": 5, "dead_max_attempts": 0, "dead_deadline": 0,  # all but t2
        "recovered": 0, "succeeded_first": 1,
        "cancelled": 0,                # t6 dies before anyone could cancel it
        "resources_quarantined": 5,    # a plain non-retryable pattern quarantines: t1, t3, t4, t5, t6's
    }


def test_a_non_retryable_pattern_that_dead_letters_quarantines_nothing(history, policy):
    result = run(policy, non_retryable_error_patterns=[{"pattern": "banned|timed out", "action": "dead_letter"}])
    assert (result.proposed.dead.total, result.proposed.resources_quarantined.total) == (5, 0)


def test_a_deadline_refuses_the_retries_due_after_it(history, policy):
    # Attempt 1 fails at 1 s: its retry is due at 61 s (inside 100 s); attempt 2 fails at 62 s:
    # its retry would be due at 122 s, past the deadline.
    result = run(policy, deadline_seconds=100)
    assert figures(result.proposed) == {
        "retries_scheduled": 4,    # t1, t3, t5, t6: one each
        "dead": 3, "dead_non_retryable": 1, "dead_max_attempts": 0, "dead_deadline": 2,  # t4; t3, t5
        "recovered": 1, "succeeded_first": 1, "cancelled": 1, "resources_quarantined": 1,
    }


def test_more_attempts_than_recorded_are_estimated_from_the_signatures_observed_success(history, policy):
    # Timeouts followed by another attempt: t1 (then success), t3 twice (failures), t5 twice (a
    # failure, then a success): p = 2/5. t3, recorded dead after 3, gets a 4th and a 5th attempt:
    # recovers at the 4th with 0.4, at the 5th with 0.6 x 0.4; dies after the 5th with 0.6 x 0.6.
    result = run(policy, max_attempts=5)
    proposed = result.proposed
    assert figures(proposed) == {
        "retries_scheduled": 7.6,  # counted: t1 1, t3 3, t5 2, t6 1; expected: the 5th of t3, 0.6
        "dead": 1.36, "dead_non_retryable": 1, "dead_max_attempts": 0.36, "dead_deadline": 0,
        "recovered": 2.64,         # t1, t5; and 0.4 + 0.24 of t3
        "succeeded_first": 1, "cancelled": 1, "resources_quarantined": 1,
    }
    assert (proposed.retries_scheduled.counted, proposed.recovered.counted) == (7, 2)
    assert result.has_expected


def test_an_estimated_retry_past_the_deadline_is_refused_with_the_expected_weight(history, policy):
    # t3's 3rd attempt fails at 123 s; its retry, due at 183 s, fits in 200 s and is counted. The
    # 4th attempt is estimated: it succeeds with 0.4 and fails at 184 s with 0.6, when a retry due
    # at 244 s would pass the deadline.
    proposed = run(policy, max_attempts=5, deadline_seconds=200).proposed
    assert (proposed.retries_scheduled.counted, proposed.retries_scheduled.expected) == (7, 0)
    assert proposed.recovered.expected == pytest.approx(0.4)
    assert proposed.dead_deadline.expected == pytest.approx(0.6)
    assert proposed.dead_max_attempts.total == 0


def test_a_thousand_attempts_never_seen_recover_every_task_a_success_ever_followed(history, policy):
    proposed = run(policy, max_attempts=1000).proposed
    assert proposed.recovered.expected == pytest.approx(1)  # 1 - 0.6 ** 998
    assert proposed.retries_scheduled.expected == pytest.approx(0.6 / 0.4)  # 0.6 + 0.6² + ...


def test_each_signature_is_estimated_with_its_own_success_rate(pool, policy):
    build(pool, policy)  # "read timed out": 2 of its 5 followed failures were followed by a success
    record(policy, pool, [("TimeoutError", "socket timed out")] * 3, state="dead")  # followed twice, never
    record(policy, pool, [("OSError", "disk timed out")] * 3, state="dead")  # the same
    result = run(policy, max_attempts=4)
    # One more attempt for each task that died after 3: t3 recovers at its 4th with 0.4 and dies
    # with 0.6; the socket and the disk tasks, whose signatures never recovered, die with 1.
    assert result.proposed.recovered.expected == pytest.approx(0.4)
    assert result.proposed.dead_max_attempts.expected == pytest.approx(0.6 + 1 + 1)


def test_a_signature_never_followed_uses_the_pooled_rate(pool, policy):
    build(pool, policy)
    record(policy, pool, [("OSError", "disk timed out")], state="dead",
           verdict=("non_retryable", "dead_letter"))  # recorded as non-retryable: never followed
    result = run(policy, non_retryable_error_patterns=[])
    # Without its pattern "banned" falls to the default classification (non-retryable, quarantine);
    # the disk timeout is retryable under the policy's "timed out": attempts 2 and 3 are new, at the
    # pooled p = 2/5: recovered 0.4 + 0.6 x 0.4, dead after the 3rd 0.36.
    assert result.proposed.recovered.expected == pytest.approx(0.64)
    assert result.proposed.dead_max_attempts.expected == pytest.approx(0.36)


def test_an_abandoned_attempt_keeps_its_recorded_verdict(pool, policy):
    record(policy, pool, [("WorkerLost", "worker lost: its lease expired"), "ok"], state="succeeded",
           outcome="abandoned", verdict=("retryable", "retry_same_resource"))
    result = run(policy, non_retryable_error_patterns=["worker lost"])
    assert (result.proposed.recovered.total, result.proposed.dead.total) == (1, 0)


def test_a_failed_claim_keeps_its_recorded_verdict(pool, policy):
    task = record(policy, pool, [("ResourceUnavailable", "resource in use, timed out"), "ok"], state="succeeded")
    task.attempts.filter(number=1).update(resource=None)
    result = run(policy, non_retryable_error_patterns=["in use"])
    assert (result.proposed.recovered.total, result.proposed.dead.total) == (1, 0)


def test_two_tasks_quarantining_one_resource_count_it_once(pool, policy):
    shared = ResourceFactory(pool=pool)
    for _ in range(2):
        record(policy, pool, [BANNED], state="dead", resource=shared)
    assert run(policy).current.resources_quarantined.total == 1


def test_jittered_backoff_uses_the_expected_delay(pool):
    # Cap 200 s: the expected jittered delay is 100 s. Attempt 1 fails at 1 s: due at 101 s.
    policy = checkout_policy(backoff="exponential_jitter", initial_delay_seconds=200, max_delay_seconds=200)
    record(policy, pool, [TIMEOUT, "ok"], state="succeeded")
    assert run(policy, deadline_seconds=101).proposed.recovered.total == 1
    assert run(policy, deadline_seconds=100.9).proposed.dead_deadline.total == 1


def test_only_ended_tasks_of_the_policy_in_the_window_are_replayed(pool, policy):
    record(policy, pool, ["ok"], state="succeeded")
    record(policy, pool, ["ok"], state="succeeded", created=timezone.now() - timedelta(days=8))
    record(RetryPolicyFactory(name="other"), pool, ["ok"], state="succeeded")
    record(policy, pool, [TIMEOUT], state="retrying")
    result = run(policy)
    assert (result.tasks, result.live_tasks, result.current.succeeded_first.total) == (1, 1, 1)
    assert what_if(policy="checkout", proposed=proposal(policy, {}), days=9).tasks == 2


@pytest.mark.parametrize("changes, field", [
    ({"max_attempts": float("nan")}, "max_attempts"),
    ({"initial_delay_seconds": float("inf")}, "initial_delay_seconds"),
    ({"deadline_seconds": "soon"}, "deadline_seconds"),
    ({"non_retryable_error_patterns": ["(unclosed"]}, "non_retryable_error_patterns[0]"),
    ({"name": "another"}, "name"),
])
def test_a_bad_proposal_is_refused_naming_its_field(policy, changes, field):
    with pytest.raises(DomainError) as refused:
        proposal(policy, changes)
    assert (refused.value.code, refused.value.details["field"]) == ("bad_policy", field)


def test_an_unknown_field_is_refused_naming_it(policy):
    with pytest.raises(DomainError, match="unknown fields: retries"):
        proposal(policy, {"retries": 2})


@pytest.mark.parametrize("days", [0, -1, 367, 1.5, True, "7"])
def test_days_out_of_range_are_refused_naming_days(policy, days):
    with pytest.raises(DomainError) as refused:
        what_if(policy=policy, proposed=proposal(policy, {}), days=days)
    assert refused.value.details["field"] == "days"


def test_an_unknown_policy_is_refused_by_name(policy):
    with pytest.raises(DomainError) as refused:
        what_if(policy="nope", proposed=proposal(policy, {}))
    assert refused.value.code == "unknown_policy"


def test_the_replay_writes_nothing(history, policy):
    with CaptureQueriesContext(connection) as queries:
        run(policy, max_attempts=5)
    assert queries.captured_queries
    assert [q["sql"] for q in queries.captured_queries if WRITE.search(q["sql"])] == []

