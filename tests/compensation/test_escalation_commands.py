"""manage.py escalate: one escalation run from the shell, a summary, --dry-run, clear refusals."""

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from audit.models import AuditEntry
from compensation.models import DeadLetter
from compensation.services import escalation
from compensation.services.dead_letters import collect_dead_letters
from compensation.work_orders.models import WorkOrder
from tests.compensation.conftest import dead_tasks

pytestmark = pytest.mark.django_db


def escalate(*args) -> str:
    out = StringIO()
    call_command("escalate", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


@pytest.fixture
def missed(pool, instant_policy, no_channels):
    """An open dead letter whose work order was deleted: nobody has to act on it."""
    dead_tasks(pool=pool, policy=instant_policy)
    [letter] = collect_dead_letters()
    WorkOrder.objects.all().delete()
    return letter


def orphaned() -> bool:
    return DeadLetter.objects.filter(work_order__isnull=True).exists()


def test_escalate_prints_what_each_step_did(missed):
    said = escalate("--actor", "ops:carol")
    assert said.startswith("work orders: give 1 open dead letters one (1 work orders); notifications")
    assert "SLA breaches: mark 0 notice, 0 acknowledge, 0 compensate" in said
    assert not orphaned()


def test_escalate_dry_run_counts_and_changes_nothing(missed):
    said = escalate("--dry-run")
    assert said.startswith("dry run: work orders: would give 1 open dead letters one")
    assert orphaned()


def test_escalate_runs_only_the_steps_named(missed):
    assert escalate("--steps", "notifications,breaches").startswith("notifications: send 0 failed ones again; SLA")
    assert orphaned()


def test_escalate_with_an_unknown_step_names_the_option_and_the_step(missed):
    with pytest.raises(CommandError, match="--steps: unknown escalation step breach: use work_orders"):
        escalate("--steps", "breach")
    assert orphaned()


def test_escalate_audits_a_breach_as_the_command_and_its_actor(missed):
    escalate()
    WorkOrder.objects.update(first_dead_at=timezone.now() - timedelta(hours=1))
    escalate("--actor", "ops:carol")
    entry = AuditEntry.objects.filter(action="work_order.sla_breach").first()
    assert (entry.actor, entry.channel) == ("ops:carol", "command")


def test_escalate_exits_non_zero_naming_a_failed_step_after_running_the_others(missed, monkeypatch):
    def broken(**kwargs):
        raise RuntimeError("database unreachable")

    monkeypatch.setattr(escalation, "orphaned_dead_letters", broken)
    with pytest.raises(CommandError, match="1 escalation step"):
        escalate()


def test_escalate_runs_with_the_dlq_inspector_off(missed, settings):
    """Escalation pages the on-call; the flag only hides the inspector."""
    settings.RETRYOPS_FLAGS_OFF = frozenset({"dlq-inspector"})
    assert escalate().startswith("work orders: give 1 open dead letters one")
