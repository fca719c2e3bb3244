"""Work orders move one transition at a time, each an audited operator action."""

import pytest

from audit.choices import AuditAction
from audit.models import AuditEntry
from compensation.choices import DeadLetterState, WorkOrderState
from compensation.models import DeadLetter
from compensation.services.dead_letters import collect_dead_letters
from compensation.work_orders.models import WorkOrder
from compensation.work_orders.services import (
    acknowledge_work_order,
    cancel_work_order,
    change_work_order,
    close_work_order,
    compensate_work_order,
    open_work_order,
    start_work_order,
)
from retryops.errors import BadInput, IllegalTransition
from tests.compensation.conftest import dead_tasks

pytestmark = pytest.mark.django_db


def audit_of(order):
    return list(AuditEntry.objects.filter(target_type="compensation.workorder", target_id=str(order.pk))
                .order_by("id").values_list("action", flat=True))


def test_a_work_order_runs_from_open_to_compensated_with_its_sla_times(order):
    acknowledge_work_order(work_order=order, actor="ops:carol")
    start_work_order(work_order=order.pk, actor="ops:carol", runbook="refund-signup")
    done = compensate_work_order(work_order=order, actor="ops:carol", resolution="refunded both")
    assert (done.state, done.assignee, done.runbook, done.resolution) == (
        WorkOrderState.COMPENSATED, "ops:carol", "refund-signup", "refunded both")
    assert order.first_dead_at <= done.created_at <= done.acknowledged_at <= done.started_at <= done.compensated_at


def test_every_work_order_action_writes_exactly_one_audit_entry(order):
    change_work_order(work_order=order, assignee="dave", actor="ops:carol")
    acknowledge_work_order(work_order=order, actor="dave")
    start_work_order(work_order=order, actor="dave")
    close_work_order(work_order=order, actor="dave", resolution="nothing to repair")
    assert audit_of(order) == [AuditAction.WORK_ORDER_CHANGE] + [AuditAction.WORK_ORDER_TRANSITION] * 3


def test_collecting_dead_letters_writes_no_audit_entry(order):
    assert audit_of(order) == []


def test_closing_a_work_order_twice_names_both_states_and_changes_nothing(order):
    close_work_order(work_order=order, actor="ops:carol")
    with pytest.raises(IllegalTransition, match="cannot close work order .*: it is closed") as refused:
        close_work_order(work_order=order, actor="ops:carol", resolution="again")
    assert (refused.value.code, refused.value.details["from_state"], refused.value.details["to_state"]) == (
        "illegal_transition", "closed", "closed")
    assert WorkOrder.objects.get(pk=order.pk).resolution == ""
    assert len(audit_of(order)) == 1


def test_an_open_work_order_cannot_be_compensated_before_it_is_acknowledged(order):
    with pytest.raises(IllegalTransition, match="it is open"):
        compensate_work_order(work_order=order, actor="ops:carol", resolution="done")


def test_compensating_a_work_order_resolves_its_open_dead_letters(order):
    start_work_order(work_order=order, actor="ops:carol")
    compensate_work_order(work_order=order, actor="ops:carol", resolution="refunded")
    assert set(DeadLetter.objects.values_list("state", flat=True)) == {DeadLetterState.RESOLVED}


def test_cancelling_a_work_order_needs_a_reason_and_leaves_its_dead_letters_open(order):
    with pytest.raises(BadInput, match="reason must not be empty"):
        cancel_work_order(work_order=order, actor="ops:carol", reason=" ")
    cancel_work_order(work_order=order, actor="ops:carol", reason="opened by a test")
    assert set(DeadLetter.objects.values_list("state", flat=True)) == {DeadLetterState.OPEN}


def test_an_operator_opens_a_work_order_by_hand_with_one_audit_entry(pool):
    order = open_work_order(title="Refund 12 orders charged twice", actor="ops:carol", pool="accounts",
                            runbook="refund")
    assert (order.state, order.source, order.opened_by, order.pool_id) == ("open", "manual", "ops:carol", pool.pk)
    assert audit_of(order) == [AuditAction.WORK_ORDER_OPEN]


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"title": ""}, "title"),
    ({"title": "x" * 301}, "title"),
    ({"title": "ok", "notes": "a\x00b"}, "notes"),
])
def test_opening_a_work_order_with_bad_input_names_the_field_and_writes_nothing(db, kwargs, field):
    with pytest.raises(BadInput) as refused:
        open_work_order(**{"actor": "ops:carol", **kwargs})
    assert refused.value.details["field"] == field
    assert not WorkOrder.objects.exists()


def test_a_manual_work_order_for_a_signature_does_not_take_its_dead_letters(pool, instant_policy):
    open_work_order(title="watch timeouts", actor="ops:carol", flow="demo")
    dead_tasks(pool=pool, policy=instant_policy)
    [letter] = collect_dead_letters()
    assert letter.work_order.source == "dead_letters"
