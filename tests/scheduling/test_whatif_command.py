"""manage.py policy_whatif: the side-by-side table, its JSON, and every bad input named."""

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from scheduling.models import RetryPolicy, RetryPolicyChange
from tests.scheduling.whatif_history import build, checkout_policy

pytestmark = pytest.mark.django_db


@pytest.fixture
def history(pool):
    policy = checkout_policy()
    build(pool, policy)
    return policy


def run(*args) -> str:
    out = StringIO()
    call_command("policy_whatif", *args, stdout=out)
    return out.getvalue()


def test_the_table_puts_the_current_and_the_proposed_counts_side_by_side(history):
    out = run("checkout", "--set", "max_attempts=2")
    assert "Proposed: max_attempts 3 → 2" in out
    lines = {line.strip().split("  ")[0]: line.split() for line in out.splitlines() if "  " in line.strip()}
    assert lines["Retries scheduled"][-3:] == ["6", "4", "-2"]
    assert lines["of which: all attempts failed"][-3:] == ["1", "2", "+1"]
    assert lines["Recovered tasks (succeeded after a retry)"][-3:] == ["2", "1", "-1"]


def test_json_carries_the_counted_and_expected_parts(history):
    answer = json.loads(run("checkout", "--set", "max_attempts=5", "--json"))
    assert answer["changes"] == {"max_attempts": {"current": 3, "proposed": 5}}
    assert answer["current"]["recovered"] == {"total": 2, "counted": 2, "expected": 0}
    assert answer["proposed"]["recovered"] == {"total": 2.64, "counted": 2, "expected": 0.64}
    assert answer["tasks"] == 6


def test_a_policy_file_entry_is_the_proposal(history, tmp_path):
    path = tmp_path / "policies.yaml"
    path.write_text("policies:\n  - name: other\n    max_attempts: 9\n  - name: checkout\n    deadline_seconds: 100\n")
    assert json.loads(run("checkout", "--file", str(path), "--json"))["proposed"]["dead_deadline"]["total"] == 2


def test_set_applies_over_the_file(history, tmp_path):
    path = tmp_path / "proposal.yaml"
    path.write_text("max_attempts: 2\ndeadline_seconds: 100\n")
    answer = json.loads(run("checkout", "--file", str(path), "--set", "deadline_seconds=null", "--json"))
    assert answer["changes"] == {"max_attempts": {"current": 3, "proposed": 2}}


@pytest.mark.parametrize("args, message", [
    (["--set", "max_attempts"], "--set expects field=value, got 'max_attempts'"),
    (["--set", "=3"], "--set expects field=value"),
    (["--set", "max_attempts=nan"], "max_attempts must be a whole number, got 'nan'"),
    (["--set", "max_attempts=.nan"], "max_attempts must be a whole number, got nan"),
    (["--set", "max_attempts=0"], "max_attempts must be at least 1, got 0"),
    (["--set", "initial_delay_seconds=.inf"], "initial_delay_seconds must be a finite number"),
    (["--set", "backoff=sometimes"], "backoff must be one of fixed, exponential, exponential_jitter"),
    (["--set", "retryable_error_patterns=['(']"], r"retryable_error_patterns\[0\]: invalid error pattern"),
    (["--set", 'description="a\\0b"'], "description contains a NUL character"),
    (["--set", "retries=2"], "unknown fields: retries"),
    (["--set", "name=other"], "name cannot change in a what-if"),
    (["--set", "max_attempts=2", "--set", "max_attempts=3"], "--set max_attempts is given twice"),
    (["--set", "retryable_error_patterns=[\"a"], "--set retryable_error_patterns: the value is not valid YAML"),
    (["--days", "0"], "days must be a whole number from 1 to 366, got 0"),
    (["--file", "/nonexistent/proposal.yaml"], "cannot read /nonexistent/proposal.yaml"),
])
def test_bad_input_is_refused_naming_it(history, args, message):
    with pytest.raises(CommandError, match=message):
        run("checkout", *args)


def test_an_unknown_policy_is_named(db):
    with pytest.raises(CommandError, match="no retry policy 'nope'"):
        run("nope")


def test_a_file_without_the_policy_is_refused_naming_both(history, tmp_path):
    path = tmp_path / "policies.yaml"
    path.write_text("policies:\n  - name: other\n    max_attempts: 9\n")
    with pytest.raises(CommandError, match=f"{path} has no policy named 'checkout'"):
        run("checkout", "--file", str(path))


def test_the_command_changes_no_policy(history):
    before = list(RetryPolicy.objects.values())
    run("checkout", "--set", "max_attempts=9")
    assert list(RetryPolicy.objects.values()) == before
    assert not RetryPolicyChange.objects.exists()


def test_the_help_reads_in_the_language_the_command_runs_in(db):
    from django.utils import translation

    from scheduling.management.commands.policy_whatif import Command

    with translation.override("zh-hans"):
        assert "不写入任何数据" in Command().create_parser("manage.py", "policy_whatif").format_help()
