import random

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from scheduling import services
from scheduling.errors import BadPolicy
from scheduling.models import RetryPolicy, RetryPolicyChange
from resources.classification import MATCHED_TEXT_LENGTH
from scheduling.policies import clean_policy, judge, retry_delay

GOOD = {
    "name": "p", "max_attempts": 3, "backoff": "exponential", "initial_delay_seconds": 120, "multiplier": 2,
    "max_delay_seconds": 600, "same_resource_on_retry": True,
    "retryable_error_patterns": ["timeout", {"pattern": "captcha", "action": "retry_other_resource"}],
    "non_retryable_error_patterns": [{"pattern": "risk control", "probation": True}],
}


def document(*policies):
    return yaml.safe_dump({"policies": list(policies)}, explicit_end=True)


# backoff


def test_fixed_backoff_waits_the_same_every_time():
    assert [retry_delay(backoff="fixed", attempt=n, initial=120, multiplier=2, maximum=600) for n in (1, 2, 5)] == [120] * 3


def test_exponential_backoff_multiplies_and_stops_at_the_cap():
    delays = [retry_delay(backoff="exponential", attempt=n, initial=120, multiplier=2, maximum=600) for n in range(1, 6)]
    assert delays == [120, 240, 480, 600, 600]


def test_exponential_backoff_survives_huge_attempt_numbers():
    assert retry_delay(backoff="exponential", attempt=10_000, initial=1, multiplier=10, maximum=60) == 60


@pytest.mark.parametrize("attempt", [1, 3, 8])
def test_full_jitter_stays_between_zero_and_the_capped_exponential(attempt):
    rng = random.Random(attempt)
    cap = min(600, 120 * 2 ** (attempt - 1))
    delays = [retry_delay(backoff="exponential_jitter", attempt=attempt, initial=120, multiplier=2, maximum=600, rng=rng)
              for _ in range(500)]
    assert all(0 <= d <= cap for d in delays)
    assert max(delays) > cap * 0.9 and min(delays) < cap * 0.1  # it really spreads over the range


# validation


def test_a_valid_policy_is_normalised():
    cleaned = clean_policy(GOOD)
    assert cleaned["retryable_error_patterns"] == [
        {"pattern": "timeout", "action": "retry_same_resource", "probation": False},
        {"pattern": "captcha", "action": "retry_other_resource", "probation": False},
    ]
    assert cleaned["non_retryable_error_patterns"][0]["action"] == "quarantine"


@pytest.mark.parametrize("field", ["max_attempts", "backoff", "initial_delay_seconds", "retryable_error_patterns"])
def test_a_missing_field_is_named(field):
    with pytest.raises(BadPolicy, match=f"missing field '{field}'"):
        clean_policy({k: v for k, v in GOOD.items() if k != field})


def test_a_pattern_that_times_out_on_the_probe_text_is_refused_naming_it():
    data = {**GOOD, "retryable_error_patterns": ["timeout", r"(a+)+$"]}

    with pytest.raises(BadPolicy, match=r"^retryable_error_patterns\[1\]: error pattern '\(a\+\)\+\$' took longer than "):
        clean_policy(data)


@pytest.mark.parametrize("pattern", [r"(x+y)+", r"(ab){1,3}", r"(\d{3})+", r"(?>a+)+", r"time(d)?[ _-]?out",
                                     r"(foo|bar)+", r"(reset|refused)+", r"(a+){2}"])
def test_a_pattern_that_finishes_on_the_probe_text_is_accepted(pattern):
    assert clean_policy({**GOOD, "retryable_error_patterns": [pattern]})["retryable_error_patterns"][0]["pattern"] == pattern


def test_a_bad_regex_is_named_with_its_place():
    with pytest.raises(BadPolicy, match=r"retryable_error_patterns\[1\]: invalid error pattern '\(oops'"):
        clean_policy({**GOOD, "retryable_error_patterns": ["ok", "(oops"]})


@pytest.mark.parametrize("change, message", [
    ({"backoff": "linear"}, "backoff must be one of"),
    ({"max_attempts": 0}, "max_attempts must be at least 1"),
    ({"max_attempts": "3"}, "max_attempts must be a whole number"),
    ({"max_delay_seconds": 60}, "max_delay_seconds must be at least initial_delay_seconds"),
    ({"retryable_error_patterns": [{"pattern": "x", "action": "explode"}]}, r"\[0\].action must be one of"),
    ({"colour": "blue"}, "unknown fields: colour"),
])
def test_bad_values_are_refused_with_the_field_named(change, message):
    with pytest.raises(BadPolicy, match=message):
        clean_policy({**GOOD, **change})


# matching


def test_judge_uses_the_policys_patterns_and_their_actions(db):
    policy = RetryPolicy(**{k: v for k, v in clean_policy(GOOD).items()})
    assert judge(policy, "captcha required").action == "retry_other_resource"
    risk = judge(policy, "blocked by risk control")
    assert (risk.category, risk.action, risk.probation) == ("non_retryable", "quarantine", True)
    assert judge(policy, PermissionError("HTTP 403")).category == "non_retryable"  # the defaults still apply
    assert judge(policy, ValueError("odd")).action == "retry_same_resource"


def test_a_pattern_that_times_out_on_an_error_counts_as_not_matching_and_is_logged(caplog):
    # A pattern stored before the probe existed (or slow only on this text): the verdict falls to
    # the next pattern and the defaults, and the attempt's outcome is still written.
    policy = RetryPolicy(**{**clean_policy(GOOD), "non_retryable_error_patterns": [
        {"pattern": r"(a|aa)+$", "action": "dead_letter", "probation": False}]})
    verdict = judge(policy, "a" * (MATCHED_TEXT_LENGTH - 1) + "!" + "b" * 1_000_000)
    assert (verdict.category, verdict.action, verdict.classification.pattern) == (
        "retryable", "retry_same_resource", None)
    assert "error pattern '(a|aa)+$' took longer than" in caplog.text


def test_patterns_read_only_the_start_of_a_huge_error_text():
    policy = RetryPolicy(**clean_policy(GOOD))
    assert judge(policy, "x" * MATCHED_TEXT_LENGTH + " risk control").action == "retry_same_resource"
    assert judge(policy, "risk control " + "x" * MATCHED_TEXT_LENGTH).action == "quarantine"


# loading


def test_loading_writes_every_policy_and_records_the_change(db):
    services.load_retry_policies(text=document(GOOD, {**GOOD, "name": "q"}), source="t.yaml", actor="loader")
    assert set(RetryPolicy.objects.values_list("name", flat=True)) == {"p", "q"}
    change = RetryPolicyChange.objects.filter(policy__name="p").get()
    assert (change.changed_by, change.before, change.after["max_attempts"]) == ("loader", {}, 3)


def test_reloading_an_unchanged_file_records_nothing(db):
    services.load_retry_policies(text=document(GOOD), source="t.yaml", actor="loader")
    services.load_retry_policies(text=document(GOOD), source="t.yaml", actor="loader")
    assert RetryPolicyChange.objects.count() == 1


def test_a_bad_policy_anywhere_loads_nothing(db):
    bad = {k: v for k, v in GOOD.items() if k != "max_attempts"} | {"name": "broken"}
    with pytest.raises(BadPolicy, match=r"t.yaml, line \d+: policies\[1\] \(broken\): missing field 'max_attempts'"):
        services.load_retry_policies(text=document(GOOD, bad), source="t.yaml", actor="loader")
    assert not RetryPolicy.objects.exists()


def test_the_shipped_policy_file_loads(db):
    from django.conf import settings
    from django.core.management import call_command

    call_command("load_retry_policies", str(settings.RETRYOPS_POLICY_FILE))
    default = RetryPolicy.objects.get(name="default")
    assert (default.initial_delay_seconds, default.same_resource_on_retry) == (120, True)


def test_the_command_reports_a_bad_file_clearly(db, tmp_path):
    from django.core.management import CommandError, call_command

    path = tmp_path / "p.yaml"
    path.write_text("policies: [{name: x}]")
    with pytest.raises(CommandError, match="missing field 'max_attempts'"):
        call_command("load_retry_policies", str(path))


# bounds: a number the scheduler cannot turn into a time is refused where the policy is defined

DAY = 24 * 3600


@pytest.mark.parametrize("field, value", [
    ("max_attempts", 1001),
    ("max_attempts", 10**30),
    ("initial_delay_seconds", float("nan")),
    ("initial_delay_seconds", float("inf")),
    ("max_delay_seconds", float("nan")),
    ("max_delay_seconds", float("inf")),
    ("max_delay_seconds", 1e300),
    ("max_delay_seconds", 30 * DAY + 1),
    ("multiplier", float("nan")),
    ("multiplier", float("inf")),
    ("multiplier", 101),
    ("deadline_seconds", float("nan")),
    ("deadline_seconds", float("inf")),
    ("deadline_seconds", 1e12),
    ("probation_cooldown_seconds", 7 * DAY + 1),
    ("probation_cooldown_seconds", 2**31),
])
def test_a_number_that_is_not_finite_or_too_large_is_refused_with_its_field_named(field, value):
    with pytest.raises(BadPolicy, match=f"^{field} must be"):
        clean_policy({**GOOD, field: value})


def test_an_infinite_delay_in_the_yaml_file_is_refused_with_its_place(db):
    with pytest.raises(BadPolicy, match=r"t.yaml, line 5: policies\[0\] \(p\): max_delay_seconds must be"):
        services.load_retry_policies(text=document({**GOOD, "max_delay_seconds": float("inf")}), source="t.yaml",
                                     actor="loader")
    assert not RetryPolicy.objects.exists()


@pytest.mark.parametrize("change, field", [
    ({"description": "nul \x00 here"}, "description"),
    ({"name": "p\x00"}, "name"),
    ({"retryable_error_patterns": ["time\x00out"]}, r"retryable_error_patterns\[0\]"),
    ({"description": "lone \ud800 here"}, "description"),
    ({"name": "p\udc00"}, "name"),
    ({"retryable_error_patterns": ["time\ud800out"]}, r"retryable_error_patterns\[0\]"),
])
def test_text_postgresql_cannot_store_is_refused_with_its_field_named(change, field):
    with pytest.raises(BadPolicy, match=f"^{field} contains a (NUL character|lone surrogate)"):
        clean_policy({**GOOD, **change})


def test_the_largest_allowed_policy_is_accepted_and_schedules_without_overflow():
    from datetime import timedelta

    from django.utils import timezone

    largest = clean_policy({**GOOD, "max_attempts": 1000, "initial_delay_seconds": 30 * DAY, "multiplier": 100,
                            "max_delay_seconds": 30 * DAY, "deadline_seconds": 30 * DAY,
                            "probation_cooldown_seconds": 7 * DAY})
    for backoff in ("fixed", "exponential", "exponential_jitter"):
        delay = retry_delay(backoff=backoff, attempt=largest["max_attempts"], initial=largest["initial_delay_seconds"],
                            multiplier=largest["multiplier"], maximum=largest["max_delay_seconds"])
        assert timezone.now() + timedelta(seconds=delay) + timedelta(seconds=largest["deadline_seconds"])


@given(
    backoff=st.sampled_from(["fixed", "exponential", "exponential_jitter"]),
    attempt=st.integers(min_value=1, max_value=1000),
    initial=st.floats(min_value=0, max_value=30 * DAY),
    spread=st.floats(min_value=0, max_value=1),
    multiplier=st.floats(min_value=1, max_value=100),
)
def test_every_allowed_policy_gives_a_delay_between_zero_and_its_cap(backoff, attempt, initial, spread, multiplier):
    maximum = initial + spread * (30 * DAY - initial)
    delay = retry_delay(backoff=backoff, attempt=attempt, initial=initial, multiplier=multiplier, maximum=maximum,
                        rng=random.Random(attempt))
    assert 0 <= delay <= maximum


def test_a_name_longer_than_its_column_is_refused_with_its_field_named():
    with pytest.raises(BadPolicy) as refused:
        clean_policy({**GOOD, "name": "p" * 101})
    assert refused.value.details["field"] == "name"


def test_unknown_fields_that_are_not_text_are_named():
    with pytest.raises(BadPolicy, match="unknown fields: 1, extra"):
        clean_policy({**GOOD, 1: "one", "extra": 2})
