"""recovery_runbook: the shipped runbooks from the shell, with the same checks as the services."""

import io
import json

import pytest
from django.core.management import CommandError, call_command

from audit.choices import AuditAction
from audit.models import AuditEntry
from compensation.models import DeadLetter
from compensation.runbooks.models import RunbookRun
from compensation.services.dead_letters import collect_dead_letters
from compensation.work_orders.models import WorkOrder
from tests.compensation.conftest import dead_tasks

pytestmark = pytest.mark.django_db

REFUND = {"kind": "refund", "ticket": "OPS-42", "amount_cents": 1250}


@pytest.fixture
def order(pool, instant_policy) -> WorkOrder:
    dead_tasks(pool=pool, policy=instant_policy, n=2, flow="http_call", signature="HttpCallError: HTTP #: bad request")
    collect_dead_letters()
    return WorkOrder.objects.get()


def runbook(*args) -> str:
    out = io.StringIO()
    call_command("recovery_runbook", *map(str, args), stdout=out)
    return out.getvalue()


def test_list_shows_the_runbooks_suggested_for_a_work_order(order):
    out = runbook("list", "--work-order", order.pk)
    assert "refund-failed-charges" in out and "request_refund (external)" in out
    assert "replay-after-upstream-outage" not in out


def test_show_prints_the_steps_and_each_actions_input_schema():
    out = runbook("show", "refund-failed-charges")
    assert "1. **Find the charges.**" in out
    assert "- request_refund (external: needs another operator's approval)" in out
    assert '"ticket": {"pattern"' in out


def test_run_of_an_internal_action_runs_it_at_once_and_prints_its_result(order):
    out = runbook("run", "refund-failed-charges", "resolve_dead_letters", "--work-order", order.pk,
                  "--input", '{"reason": "refunded by hand"}', "--token", "cli-1", "--actor", "ops:carol")
    assert "succeeded" in out
    assert set(DeadLetter.objects.values_list("state", flat=True)) == {"resolved"}
    assert RunbookRun.objects.get().run_by == "ops:carol"


def test_an_external_action_waits_for_a_second_operator_who_approves_and_runs_it(order, httpserver, settings):
    settings.RETRYOPS_RUNBOOK_HTTP_URL = httpserver.url_for("/refunds")
    httpserver.expect_oneshot_request("/refunds", method="POST",
                                      headers={"Idempotency-Key": "cli-2"}).respond_with_json({"refund": "r_1"})
    out = runbook("run", "refund-failed-charges", "request_refund", "--work-order", order.pk,
                  "--input", json.dumps(REFUND), "--token", "cli-2", "--actor", "ops:carol")
    run = RunbookRun.objects.get()
    assert f"waits for approval by an operator other than ops:carol: manage.py recovery_runbook approve {run.pk}" in out
    with pytest.raises(CommandError, match=r"ops:carol requested .* cannot approve it too.*\[four_eyes\]"):
        runbook("approve", run.pk, "--actor", "ops:carol")
    out = runbook("approve", run.pk, "--actor", "ops:dave")
    assert "ops:dave approved" in out and 'succeeded: {"answer": {"refund": "r_1"}' in out
    [(request, _)] = httpserver.log
    assert request.json["approved_by"] == "ops:dave" and request.json["ticket"] == "OPS-42"
    assert len(request.json["tasks"]) == 2


def test_running_again_with_the_same_token_reports_the_first_run_and_runs_nothing(order):
    args = ("run", "refund-failed-charges", "resolve_dead_letters", "--work-order", order.pk,
            "--input", '{"reason": "refunded"}', "--token", "cli-3")
    runbook(*args)
    again = runbook(*args)
    assert "succeeded" in again
    assert RunbookRun.objects.count() == 1
    assert AuditEntry.objects.filter(action=AuditAction.RUNBOOK_RUN).count() == 1


def test_a_dry_run_checks_everything_and_writes_nothing(order):
    out = runbook("run", "refund-failed-charges", "request_refund", "--work-order", order.pk,
                  "--input", json.dumps(REFUND), "--token", "cli-4", "--dry-run")
    assert "would wait for another operator's approval; nothing changed" in out
    assert not RunbookRun.objects.exists()
    assert not AuditEntry.objects.filter(action__startswith="runbook.").exists()


def test_a_dry_run_approval_by_the_requester_is_refused_and_writes_nothing(order):
    runbook("run", "refund-failed-charges", "request_refund", "--work-order", order.pk, "--input",
            json.dumps(REFUND), "--token", "cli-5", "--actor", "ops:carol")
    run = RunbookRun.objects.get()
    with pytest.raises(CommandError, match="four_eyes"):
        runbook("approve", run.pk, "--actor", "ops:carol", "--dry-run")
    assert "may approve" in runbook("approve", run.pk, "--actor", "ops:dave", "--dry-run")
    run.refresh_from_db()
    assert (run.state, run.approved_by) == ("requested", "")


@pytest.mark.parametrize(("args", "message"), [
    (("nope", "x"), r"unknown runbook 'nope'.*\[unknown_runbook\]"),
    (("refund-failed-charges", "refund"), r"has no action 'refund'.*\[unknown_runbook_action\]"),
])
def test_an_unknown_runbook_or_action_is_an_error_naming_it(order, args, message):
    with pytest.raises(CommandError, match=message):
        runbook("run", *args, "--work-order", order.pk, "--token", "t")


def test_bad_input_is_an_error_naming_the_field(order):
    with pytest.raises(CommandError, match=r"input.ticket: 'OPS 42' does not match"):
        runbook("run", "refund-failed-charges", "request_refund", "--work-order", order.pk, "--input",
                json.dumps({**REFUND, "ticket": "OPS 42"}), "--token", "t")
    with pytest.raises(CommandError, match="--input is not JSON"):
        runbook("run", "refund-failed-charges", "request_refund", "--work-order", order.pk, "--input", "{",
                "--token", "t")
    assert not RunbookRun.objects.exists()


def test_an_approval_needs_an_actor(order):
    with pytest.raises(CommandError, match="approve needs --actor"):
        runbook("approve", 1)


def test_an_approvers_actor_is_kept_as_the_audit_log_cleans_it(order):
    runbook("run", "refund-failed-charges", "request_refund", "--work-order", order.pk, "--input",
            json.dumps(REFUND), "--token", "cli-6", "--actor", "ops:carol")
    run = RunbookRun.objects.get()
    runbook("approve", run.pk, "--actor", "  ops:" + "d" * 300, "--no-run")
    run.refresh_from_db()
    assert (run.state, run.approved_by) == ("approved", ("ops:" + "d" * 300)[:200])
    assert AuditEntry.objects.get(action=AuditAction.RUNBOOK_APPROVE).actor == run.approved_by
