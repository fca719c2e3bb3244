"""A runbook action that raises halfway: its run ends failed with the error, shown to the operator
(service, command, admin), and none of the action's database writes are left; a run whose process
died in the action is found and ended as failed, never left running."""

from datetime import timedelta
from io import StringIO

import psycopg
import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.urls import reverse
from django.utils import timezone

from audit.choices import AuditAction
from audit.models import AuditEntry
from compensation.choices import DeadLetterState
from compensation.jobs import dead_letters_job
from compensation.models import DeadLetter
from compensation.runbooks.models import RunbookRun, RunbookRunState
from compensation.runbooks.services import (
    RUNNER_LOCK,
    fail_interrupted_runbook_runs,
    request_runbook_action,
    run_runbook_action,
)
from compensation.services.dead_letters import resolve_dead_letter
from compensation.work_orders.models import WorkOrder

pytestmark = pytest.mark.django_db

BOOK = """---
name: faults
title: Actions that fail halfway
actions:
  - name: resolve_then_fail
    callable: tests.compensation.test_runbooks_failures.resolve_then_fail
    description: Resolves the first dead letter, then raises.
    input_schema: {type: object}
  - name: resolve_then_interrupt
    callable: tests.compensation.test_runbooks_failures.resolve_then_interrupt
    description: Resolves the first dead letter, then the operator presses Ctrl-C.
    input_schema: {type: object}
  - name: resolve_all
    callable: compensation.runbooks.actions.dead_letters.resolve_dead_letters
    description: Resolves them all.
    input_schema: {type: object}
---
1. Try it.
"""


def _resolve_first(context):
    first = DeadLetter.objects.filter(work_order_id=context.work_order_id).order_by("id").first()
    resolve_dead_letter(dead_letter=first, actor=context.actor, reason="halfway")


def resolve_then_fail(context):
    _resolve_first(context)
    raise KeyError("refund_id")


def resolve_then_interrupt(context):
    _resolve_first(context)
    raise KeyboardInterrupt


@pytest.fixture(autouse=True)
def runbook_dir(tmp_path, settings):
    (tmp_path / "faults.md").write_text(BOOK)
    settings.RETRYOPS_RUNBOOK_DIR = tmp_path
    return tmp_path


def request(order, action: str, token: str = "t-1") -> RunbookRun:
    return request_runbook_action(work_order=order, runbook="faults", action=action, input={}, token=token,
                                  actor="ops:carol")[0]


def letters_untouched(order) -> bool:
    return (set(DeadLetter.objects.filter(work_order=order).values_list("state", flat=True)) == {DeadLetterState.OPEN}
            and not AuditEntry.objects.filter(action=AuditAction.DEAD_LETTER_RESOLVE).exists()
            and WorkOrder.objects.get(pk=order.pk).state == "open")


def test_an_action_that_raises_halfway_ends_failed_with_its_error_and_leaves_none_of_its_writes(order):
    run = run_runbook_action(run=request(order, "resolve_then_fail"), actor="ops:carol")
    assert (run.state, run.error, run.result) == (RunbookRunState.FAILED, "KeyError: 'refund_id'", None)
    assert run.finished_at is not None
    assert letters_untouched(order)


def test_an_action_that_succeeds_keeps_its_writes_with_its_run(order):
    run = run_runbook_action(run=request(order, "resolve_all"), actor="ops:carol")
    assert run.state == RunbookRunState.SUCCEEDED
    assert set(DeadLetter.objects.values_list("state", flat=True)) == {DeadLetterState.RESOLVED}


def test_an_interrupted_action_ends_its_run_failed_before_the_interrupt_goes_on(order):
    run = request(order, "resolve_then_interrupt")
    with pytest.raises(KeyboardInterrupt):
        run_runbook_action(run=run, actor="ops:carol")
    run.refresh_from_db()
    assert run.state == RunbookRunState.FAILED
    assert run.error == "interrupted (KeyboardInterrupt): the action's database writes were undone"
    assert letters_untouched(order)


def test_the_command_says_the_action_failed_with_its_error_and_nothing_it_wrote_is_kept(order):
    with pytest.raises(CommandError) as failed:
        call_command("recovery_runbook", "run", "faults", "resolve_then_fail", "--work-order", str(order.pk),
                     "--token", "cli-1", stdout=StringIO())
    assert str(failed.value).endswith("failed: KeyError: 'refund_id'")
    assert letters_untouched(order)


def test_running_a_failing_action_from_the_admin_list_says_it_failed_not_that_it_ran(admin_client, order):
    run = request(order, "resolve_then_fail")
    response = admin_client.post(reverse("admin:compensation_runbookrun_changelist"),
                                 {"action": "run", "_selected_action": [run.pk]}, follow=True)
    said = [(m.level_tag, m.message) for m in response.context["messages"]]
    assert ("error", f"{run.display_name} ran and failed: KeyError: 'refund_id'") in said
    assert not any(level == "success" for level, _ in said)
    assert letters_untouched(order)


def left_running(order, *, minutes_ago: float) -> RunbookRun:
    """A run whose process was killed in its action: the start committed, nothing after it."""
    run = request(order, "resolve_all", token=f"killed-{minutes_ago}")
    RunbookRun.objects.filter(pk=run.pk).update(state=RunbookRunState.RUNNING, run_by="ops:carol",
                                                started_at=timezone.now() - timedelta(minutes=minutes_ago))
    return run


def test_a_run_left_running_by_a_dead_process_is_ended_as_failed_by_the_periodic_job(order):
    run = left_running(order, minutes_ago=5)
    assert dead_letters_job()["runbook_runs_interrupted"] == 1
    run.refresh_from_db()
    assert run.state == RunbookRunState.FAILED
    assert run.error.startswith("interrupted: the process running the action stopped before it ended")
    assert run.finished_at is not None


def test_a_run_whose_runner_is_still_at_it_is_left_running(order):
    run = left_running(order, minutes_ago=5)
    settings_dict = connection.settings_dict
    with psycopg.connect(dbname=settings_dict["NAME"], host=settings_dict["HOST"], port=settings_dict["PORT"],
                         user=settings_dict["USER"]) as runner:
        runner.execute("SELECT pg_advisory_xact_lock(%s, %s)", [RUNNER_LOCK, run.pk])
        assert fail_interrupted_runbook_runs() == []
    assert RunbookRun.objects.get(pk=run.pk).state == RunbookRunState.RUNNING


def test_a_run_that_just_started_is_not_judged(order):
    run = left_running(order, minutes_ago=0)
    assert fail_interrupted_runbook_runs() == []
    assert RunbookRun.objects.get(pk=run.pk).state == RunbookRunState.RUNNING
