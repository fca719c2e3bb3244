"""manage.py evaluate_alerts: one evaluation from the shell, --dry-run, non-zero on a failed rule."""

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from telemetry.alerts.models import Alert, AlertEvent
from telemetry.alerts.rules import RULES
from tests.telemetry.conftest import open_dead_letters

pytestmark = pytest.mark.django_db


def evaluate(*args) -> str:
    out = StringIO()
    call_command("evaluate_alerts", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


def test_evaluate_alerts_prints_each_rules_outcome_and_value(levels, no_channels):
    open_dead_letters(11)

    said = evaluate().splitlines()

    assert [line.split(":")[0] for line in said] == list(RULES)
    assert "dlq_length: fired, 11 (fires above 10): 11 open dead letters" in said
    assert Alert.objects.get(rule="dlq_length").state == "firing"


def test_evaluate_alerts_dry_run_reads_and_changes_nothing(levels, no_channels):
    open_dead_letters(11)

    said = evaluate("--dry-run")

    assert "dlq_length: 11 (fires above 10, state not evaluated yet): 11 open dead letters" in said
    assert not Alert.objects.exists() and not AlertEvent.objects.exists()


def test_evaluate_alerts_exits_non_zero_naming_a_failed_rule_after_running_the_others(levels, no_channels,
                                                                                       monkeypatch):
    open_dead_letters(11)

    def broken(*, now):
        raise RuntimeError("database on fire")

    monkeypatch.setattr(RULES["retry_failure_rate"], "read", broken)

    with pytest.raises(CommandError, match="1 alert rule"):
        evaluate()

    assert Alert.objects.get(rule="dlq_length").state == "firing"
