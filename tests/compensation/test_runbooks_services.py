"""Running runbook actions for a work order: requested once per token, approved by a second
operator when external, run once, each operator action audited once."""

import math
import threading

import pytest
from django.db import IntegrityError, connection, transaction
from django.utils import timezone, translation

from audit.choices import AuditAction
from audit.context import acting_as
from audit.models import AuditEntry
from compensation.runbooks.catalog import (
    ApprovalRequired,
    FourEyes,
    TokenReused,
    UnknownRunbook,
    UnknownRunbookAction,
)
from compensation.runbooks.models import RunbookRun, RunbookRunState
from compensation.runbooks.services import (
    approve_runbook_action,
    reject_runbook_action,
    request_runbook_action,
    run_runbook_action,
)
from compensation.services.dead_letters import collect_dead_letters
from compensation.services.replay import replay_dead_letter
from compensation.work_orders.models import WorkOrder
from compensation.work_orders.services import close_work_order
from retryops.errors import BadInput, IllegalTransition
from tests.compensation.conftest import dead_tasks

pytestmark = pytest.mark.django_db

# What the test actions saw, in order: one entry per time an action actually ran.
calls: list[dict] = []

BOOK = """---
name: test-book
title: A runbook of test actions
applies_to:
  flows: [demo]
actions:
  - name: credit
    callable: tests.compensation.test_runbooks_services.credit
    description: Credit the customer in the app's own books.
    input_schema:
      type: object
      additionalProperties: false
      required: [amount]
      properties:
        amount: {type: integer, minimum: 1}
        note: {type: string}
  - name: refund
    callable: tests.compensation.test_runbooks_services.credit
    description: Refund through the payment provider.
    external: true
    input_schema:
      type: object
      required: [amount, ticket]
      properties:
        amount: {type: integer, minimum: 1}
        ticket: {type: string, pattern: '^[A-Z]+-[0-9]+$'}
  - name: explode
    callable: tests.compensation.test_runbooks_services.explode
    description: Fails.
    input_schema: {type: object}
  - name: unstorable
    callable: tests.compensation.test_runbooks_services.unstorable
    description: Answers what jsonb cannot hold.
    input_schema: {type: object}
  - name: refused
    callable: tests.compensation.test_runbooks_services.refused
    description: Asks a service for what it refuses.
    input_schema: {type: object}
---
1. Do the thing.
"""


def credit(context):
    calls.append({"run": context.run_id, "input": context.input, "actor": context.actor, "token": context.token})
    return {"credited": context.input["amount"]}


def explode(context):
    calls.append({"run": context.run_id})
    raise ConnectionError("provider closed the connection")


def unstorable(context):
    return {"ratio": math.nan, "text": "a\x00b"}


def refused(context):
    replay_dead_letter(dead_letter=10**9, actor=context.actor)


@pytest.fixture(autouse=True)
def runbook_dir(tmp_path, settings):
    (tmp_path / "test-book.md").write_text(BOOK)
    settings.RETRYOPS_RUNBOOK_DIR = tmp_path
    calls.clear()
    return tmp_path


def request(order, action="credit", input=None, token="t-1", actor="ops:carol"):
    return request_runbook_action(work_order=order, runbook="test-book", action=action,
                                  input={"amount": 5} if input is None else input, token=token, actor=actor)[0]


def audit_actions(run):
    return list(AuditEntry.objects.filter(target_type="compensation.runbookrun", target_id=str(run.pk))
                .order_by("id").values_list("action", flat=True))


def test_an_internal_action_is_ready_at_once_and_runs_with_its_result(order):
    run = request(order)
    assert (run.state, run.requested_by, run.input) == (RunbookRunState.APPROVED, "ops:carol", {"amount": 5})
    done = run_runbook_action(run=run, actor="ops:carol")
    assert (done.state, done.result, done.run_by, done.error) == ("succeeded", {"credited": 5}, "ops:carol", "")
    assert calls == [{"run": run.pk, "input": {"amount": 5}, "actor": "ops:carol", "token": "t-1"}]
    assert done.requested_at <= done.started_at <= done.finished_at


def test_a_double_request_with_the_same_token_returns_the_first_run_and_runs_once(order):
    first = request(order)
    second = request(order.pk)
    assert second.pk == first.pk
    run_runbook_action(run=first, actor="ops:carol")
    with pytest.raises(IllegalTransition):
        run_runbook_action(run=second, actor="ops:carol")
    assert RunbookRun.objects.count() == 1
    assert len(calls) == 1
    assert audit_actions(first) == [AuditAction.RUNBOOK_REQUEST, AuditAction.RUNBOOK_RUN]


@pytest.mark.django_db(transaction=True)
def test_two_requests_racing_with_one_token_make_one_run(pool, instant_policy):
    dead_tasks(pool=pool, policy=instant_policy)
    collect_dead_letters()
    order = WorkOrder.objects.get()
    barrier, runs, errors = threading.Barrier(2), [], []

    def click():
        try:
            barrier.wait()
            runs.append(request(order.pk).pk)
        except Exception as exc:  # surfaced by the assertion below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=click) for _ in range(2)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert errors == []
    assert len(set(runs)) == 1
    assert RunbookRun.objects.count() == 1


def test_a_token_already_used_for_another_input_is_refused_and_nothing_changes(order):
    first = request(order)
    with pytest.raises(TokenReused, match="token 't-1' is already runbook run") as refused:
        request(order, input={"amount": 7})
    assert (refused.value.code, refused.value.details["run_id"]) == ("token_reused", first.pk)
    assert RunbookRun.objects.get().input == {"amount": 5}


def test_the_requester_cannot_approve_their_own_external_action(order):
    run = request(order, action="refund", input={"amount": 5, "ticket": "OPS-1"})
    assert run.state == RunbookRunState.REQUESTED
    with pytest.raises(FourEyes, match="ops:carol requested runbook run .* and cannot approve it too") as refused:
        approve_runbook_action(run=run, actor="OPS:Carol")
    assert refused.value.code == "four_eyes"
    run.refresh_from_db()
    assert (run.state, run.approved_by) == (RunbookRunState.REQUESTED, "")
    assert audit_actions(run) == [AuditAction.RUNBOOK_REQUEST]


def test_the_database_refuses_an_approval_by_the_requesters_identity_under_another_name(order):
    run = request(order, action="refund", input={"amount": 5, "ticket": "OPS-1"})
    with pytest.raises(IntegrityError, match="runbook_run_approver_not_requester"), transaction.atomic():
        RunbookRun.objects.filter(pk=run.pk).update(state=RunbookRunState.APPROVED, approved_by="api:other",
                                                    approver_identity="OPS:carol", approved_at=timezone.now())


def test_the_database_refuses_an_approval_under_the_requesters_name_whoever_is_behind_it(order):
    run = request(order, action="refund", input={"amount": 5, "ticket": "OPS-1"})
    with pytest.raises(IntegrityError, match="runbook_run_approver_not_requester"), transaction.atomic():
        RunbookRun.objects.filter(pk=run.pk).update(state=RunbookRunState.APPROVED, approved_by="ops:carol",
                                                    approver_identity="dave", approved_at=timezone.now())


def test_a_command_acting_under_the_requesting_clients_name_cannot_approve(order):
    with acting_as(actor="api:billing", channel="api", user="erin"):
        run = request(order, action="refund", input={"amount": 5, "ticket": "OPS-1"}, actor="api:billing")
    with acting_as(actor="api:billing", channel="command"), pytest.raises(FourEyes):
        approve_runbook_action(run=run, actor="api:billing")
    assert RunbookRun.objects.get(pk=run.pk).state == RunbookRunState.REQUESTED


def test_the_database_refuses_an_approval_that_names_no_approvers_identity(order):
    run = request(order, action="refund", input={"amount": 5, "ticket": "OPS-1"})
    with pytest.raises(IntegrityError, match="runbook_run_identities_named"), transaction.atomic():
        RunbookRun.objects.filter(pk=run.pk).update(state=RunbookRunState.APPROVED, approved_by="ops:dave",
                                                    approved_at=timezone.now())


def test_a_request_and_an_approval_record_the_users_behind_their_api_clients(order):
    with acting_as(actor="api:billing-a", channel="api", user="erin"):
        run = request(order, action="refund", input={"amount": 5, "ticket": "OPS-1"}, actor="api:billing-a")
    with acting_as(actor="api:ledger", channel="api", user="frank"):
        approved = approve_runbook_action(run=run, actor="api:ledger")
    assert (approved.requester_identity, approved.approver_identity) == ("erin", "frank")
    assert AuditEntry.objects.filter(action=AuditAction.RUNBOOK_APPROVE).get().after["approver_identity"] == "frank"


def test_the_database_refuses_an_external_action_ready_to_run_without_an_approver(order):
    run = request(order, action="refund", input={"amount": 5, "ticket": "OPS-1"})
    with pytest.raises(IntegrityError, match="runbook_run_external_approved"), transaction.atomic():
        RunbookRun.objects.filter(pk=run.pk).update(state=RunbookRunState.APPROVED)


def test_an_unapproved_external_action_cannot_run_and_nothing_changes(order):
    run = request(order, action="refund", input={"amount": 5, "ticket": "OPS-1"})
    with pytest.raises(ApprovalRequired, match="waits for another operator's approval") as refused:
        run_runbook_action(run=run, actor="ops:dave")
    assert refused.value.code == "approval_required"
    assert RunbookRun.objects.get().state == RunbookRunState.REQUESTED
    assert calls == []


def test_an_external_action_runs_after_a_second_operator_approves_it(order):
    run = request(order, action="refund", input={"amount": 5, "ticket": "OPS-1"})
    approved = approve_runbook_action(run=run.pk, actor="ops:dave")
    assert (approved.state, approved.approved_by) == (RunbookRunState.APPROVED, "ops:dave")
    done = run_runbook_action(run=run, actor="ops:dave")
    assert (done.state, done.requested_by, done.approved_by, done.run_by) == (
        "succeeded", "ops:carol", "ops:dave", "ops:dave")


def test_an_action_later_marked_external_needs_approval_before_it_runs(order, runbook_dir):
    run = request(order)
    (runbook_dir / "test-book.md").write_text(BOOK.replace(
        "    description: Credit the customer in the app's own books.\n",
        "    description: Credit the customer in the app's own books.\n    external: true\n"))
    with pytest.raises(ApprovalRequired, match="is now marked external"):
        run_runbook_action(run=run, actor="ops:carol")
    assert calls == []


def test_an_action_later_marked_external_runs_once_a_second_operator_approves_it(order, runbook_dir):
    run = request(order)
    (runbook_dir / "test-book.md").write_text(BOOK.replace(
        "    description: Credit the customer in the app's own books.\n",
        "    description: Credit the customer in the app's own books.\n    external: true\n"))
    with pytest.raises(FourEyes):
        approve_runbook_action(run=run, actor="ops:carol")
    approved = approve_runbook_action(run=run, actor="ops:dave")
    assert (approved.state, approved.approved_by) == (RunbookRunState.APPROVED, "ops:dave")
    assert run_runbook_action(run=run, actor="ops:carol").state == RunbookRunState.SUCCEEDED
    assert len(calls) == 1


def test_an_unknown_action_is_refused_naming_the_runbooks_actions(order):
    with pytest.raises(UnknownRunbookAction, match="runbook 'test-book' has no action 'refnud'; its actions: "
                                                   "credit, refund, explode, unstorable, refused") as refused:
        request(order, action="refnud")
    assert refused.value.code == "unknown_runbook_action"
    assert not RunbookRun.objects.exists()


def test_an_unknown_runbook_is_refused_naming_the_known_ones(order):
    with pytest.raises(UnknownRunbook, match="unknown runbook 'nope'; known runbooks: test-book"):
        request_runbook_action(work_order=order, runbook="nope", action="credit", input={}, token="t", actor="a")


@pytest.mark.parametrize(("action", "value", "field"), [
    ("credit", {"amount": "five"}, "input.amount"),
    ("credit", {"amount": 0}, "input.amount"),
    ("credit", {}, "input.amount"),
    ("credit", {"amount": 5, "notes": "typo"}, "input.notes"),
    ("refund", {"amount": 5, "ticket": "ops 1"}, "input.ticket"),
    ("credit", [5], "input"),
])
def test_bad_input_is_refused_naming_the_field_and_nothing_is_written(order, action, value, field):
    with pytest.raises(BadInput) as refused:
        request(order, action=action, input=value)
    assert (refused.value.code, refused.value.details["field"]) == ("bad_input", field)
    assert not RunbookRun.objects.exists()
    assert not AuditEntry.objects.filter(action=AuditAction.RUNBOOK_REQUEST).exists()


@pytest.mark.parametrize(("value", "field"), [
    ({"amount": 5, "note": "a\x00b"}, "input.note"),
    ({"amount": 5, "note": math.nan}, "input.note"),
    ({"amount": 2**60}, "input.amount"),
])
def test_values_postgres_cannot_store_are_refused_with_their_place(order, value, field):
    with pytest.raises(BadInput) as refused:
        request(order, input=value)
    assert refused.value.details["field"] == field


@pytest.mark.parametrize(("kwargs", "field"), [({"token": " "}, "token"), ({"token": "a b"}, "token")])
def test_a_request_without_a_usable_token_names_it(order, kwargs, field):
    with pytest.raises(BadInput) as refused:
        request(order, **kwargs)
    assert refused.value.details["field"] == field


def test_every_runbook_action_writes_exactly_one_audit_entry(order):
    external = request(order, action="refund", input={"amount": 5, "ticket": "OPS-1"}, token="t-ext")
    approve_runbook_action(run=external, actor="ops:dave")
    run_runbook_action(run=external, actor="ops:dave")
    withdrawn = request(order, token="t-other")
    reject_runbook_action(run=withdrawn, actor="ops:carol", reason="asked by mistake")
    assert audit_actions(external) == [AuditAction.RUNBOOK_REQUEST, AuditAction.RUNBOOK_APPROVE,
                                       AuditAction.RUNBOOK_RUN]
    assert audit_actions(withdrawn) == [AuditAction.RUNBOOK_REQUEST, AuditAction.RUNBOOK_REJECT]
    entry = AuditEntry.objects.get(action=AuditAction.RUNBOOK_APPROVE)
    assert (entry.actor, entry.before["state"], entry.after["state"]) == ("ops:dave", "requested", "approved")


def test_a_failing_action_is_kept_failed_with_its_error_and_cannot_run_again(order):
    run = request(order, action="explode", input={})
    failed = run_runbook_action(run=run, actor="ops:carol")
    assert (failed.state, failed.error, failed.result) == (
        "failed", "ConnectionError: provider closed the connection", None)
    with pytest.raises(IllegalTransition, match="it is failed .*it ran already, by ops:carol"):
        run_runbook_action(run=run, actor="ops:carol")
    assert len(calls) == 1
    assert WorkOrder.objects.get().state == "open"


def test_an_actions_refusal_is_kept_in_english_whatever_the_operators_language(order):
    run = request(order, action="refused", input={})
    with translation.override("zh-hans"):
        failed = run_runbook_action(run=run, actor="ops:carol")
    assert failed.error == "not_found: no dead letter with id 1000000000"


def test_a_successful_action_moves_an_open_work_order_in_progress_with_its_runbook(order):
    run_runbook_action(run=request(order), actor="ops:carol")
    order.refresh_from_db()
    assert (order.state, order.runbook) == ("in_progress", "test-book")
    assert AuditEntry.objects.filter(action=AuditAction.WORK_ORDER_TRANSITION, actor="ops:carol").count() == 1


def test_a_result_postgres_cannot_store_is_kept_repaired_with_a_note(order):
    done = run_runbook_action(run=request(order, action="unstorable", input={}), actor="ops:carol")
    assert (done.state, done.result) == ("succeeded", {"ratio": None, "text": "a\ufffdb"})
    assert len(done.repairs) == 2


def test_a_rejected_run_can_be_neither_approved_nor_run(order):
    run = request(order, action="refund", input={"amount": 5, "ticket": "OPS-1"})
    reject_runbook_action(run=run, actor="ops:dave", reason="wrong amount")
    with pytest.raises(IllegalTransition, match="cannot approve runbook run .*: it is rejected \\(by ops:dave\\)"):
        approve_runbook_action(run=run, actor="ops:dave")
    with pytest.raises(IllegalTransition, match="it is rejected"):
        run_runbook_action(run=run, actor="ops:dave")
    assert calls == []


def test_no_runbook_action_is_requested_for_a_closed_work_order(order):
    close_work_order(work_order=order, actor="ops:carol")
    with pytest.raises(IllegalTransition, match="it is closed; only a live work order"):
        request(order)
    assert not RunbookRun.objects.exists()
