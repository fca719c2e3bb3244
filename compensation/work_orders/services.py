"""Work orders: opened by dead letters (grouped by flow and error signature) or by an operator,
then moved by one service per transition, each locking the row and writing its audit entry."""
from datetime import datetime

from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import pgettext_lazy

from audit.choices import AuditAction
from audit.services import record_audit
from compensation.choices import (
    WORK_ORDER_LIVE,
    DeadLetterState,
    WorkOrderSource,
    WorkOrderState,
    state_words,
)
from compensation.inputs import locked, text
from compensation.models import DeadLetter
from compensation.notifications.services import queue_notification, work_order_dedup_key
from compensation.work_orders.models import WorkOrder
from resources.models import ResourcePool
from resources.selectors import get_pool
from retryops.errors import IllegalTransition

TITLE_LENGTH = WorkOrder._meta.get_field("title").max_length
S = WorkOrderState

# Which states each transition leaves from; anything else is an IllegalTransition naming both.
TRANSITIONS = {
    "acknowledge": ((S.OPEN,), S.ACKNOWLEDGED),
    "start": ((S.OPEN, S.ACKNOWLEDGED), S.IN_PROGRESS),
    "compensate": ((S.ACKNOWLEDGED, S.IN_PROGRESS), S.COMPENSATED),
    "close": (WORK_ORDER_LIVE, S.CLOSED),
    "cancel": (WORK_ORDER_LIVE, S.CANCELLED),
}


# Each transition as its refusal says it: "cannot <verb> work order 7".
VERBS = {
    "acknowledge": pgettext_lazy("work order transition", "acknowledge"),
    "start": pgettext_lazy("work order transition", "start"),
    "compensate": pgettext_lazy("work order transition", "compensate"),
    "close": pgettext_lazy("work order transition", "close"),
    "cancel": pgettext_lazy("work order transition", "cancel"),
}


def _snapshot(order: WorkOrder) -> dict:
    return {"state": order.state, "assignee": order.assignee, "runbook": order.runbook,
            "resolution": order.resolution}


def _page(order: WorkOrder, event: str) -> None:
    """Page the on-call about a work order that opened (trigger), or resolve the page when it
    ended; queued in the caller's transaction, sent once it commits."""
    verb = "opened" if event == "trigger" else f"{order.state}"
    queue_notification(
        event=event, dedup_key=work_order_dedup_key(order.pk), subject_id=order.pk, subject_label=str(order),
        summary=f"Work order {order.pk} {verb}: {order.title}",
        details={"flow": order.flow, "error_signature": order.error_signature,
                 "dead_letters": order.dead_letter_count, "state": order.state},
        link=f"/admin/compensation/workorder/{order.pk}/change/")


def join_work_order(*, flow: str, error_signature: str, pool_id: int, died: list[datetime]) -> WorkOrder:
    """The live work order of this flow and signature, joined by new dead letters that died at
    `died`; opened when there is none. Called in the transaction that makes or moves the dead
    letters; the system's own act, so no audit entry (the dead letters are the record)."""
    first_dead_at, last_dead_at, count = min(died), max(died), len(died)
    for _attempt in range(2):
        order = (WorkOrder.objects.select_for_update()
                 .filter(source=WorkOrderSource.DEAD_LETTERS, state__in=WORK_ORDER_LIVE, flow=flow,
                         error_signature=error_signature).first())
        if order is not None:
            order.dead_letter_count += count
            order.last_dead_at = max(order.last_dead_at or last_dead_at, last_dead_at)
            order.save(update_fields=["dead_letter_count", "last_dead_at", "updated_at"])
            return order
        try:
            # A savepoint: a collector that loses the race to open it joins the winner's.
            with transaction.atomic():
                order = WorkOrder.objects.create(
                    title=f"{flow}: {error_signature or 'no error recorded'}"[:TITLE_LENGTH],
                    source=WorkOrderSource.DEAD_LETTERS, flow=flow, error_signature=error_signature,
                    pool_id=pool_id, opened_by="dead letters", dead_letter_count=count, first_dead_at=first_dead_at,
                    last_dead_at=last_dead_at)
        except IntegrityError:
            continue
        _page(order, "trigger")
        return order
    raise RuntimeError(f"work order for {flow} / {error_signature} neither found nor created")


def open_work_order(*, title: str, actor: str, flow: str = "", pool: ResourcePool | int | str | None = None,
                    runbook: str = "", notes: str = "", assignee: str = "") -> WorkOrder:
    """Open a work order by hand (POST /api/ops/workorders): a case no dead letter opened."""
    title = text(title, field="title", max_length=TITLE_LENGTH, required=True)
    flow = text(flow, field="flow", max_length=100)
    runbook = text(runbook, field="runbook", max_length=200)
    notes = text(notes, field="notes", max_length=20000)
    assignee = text(assignee, field="assignee", max_length=200)
    pool_id = get_pool(pool).pk if pool is not None else None
    with transaction.atomic():
        order = WorkOrder.objects.create(title=title, source=WorkOrderSource.MANUAL, flow=flow, pool_id=pool_id,
                                         runbook=runbook, notes=notes, assignee=assignee, opened_by=actor)
        record_audit(action=AuditAction.WORK_ORDER_OPEN, target=order, before=None,
                     after={**_snapshot(order), "title": title, "flow": flow, "pool": pool_id}, actor=actor)
        _page(order, "trigger")
    return order


def _move(order: WorkOrder | int, *, action: str, actor: str, reason: str = "", **changes) -> WorkOrder:
    sources, target = TRANSITIONS[action]
    with transaction.atomic():
        order = locked(WorkOrder, order, kind="work_order")
        if order.state not in sources:
            raise IllegalTransition(
                _("cannot %(action)s work order %(id)s: it is %(state)s, and only a work order that is %(sources)s "
                  "can become %(target)s") % {
                    "action": VERBS[action], "id": order.pk, "state": state_words(S, order.state),
                    "sources": state_words(S, *sources), "target": state_words(S, target)},
                kind="work_order", id=order.pk, from_state=order.state, to_state=target, action=action)
        before = _snapshot(order)
        now = timezone.now()
        order.state = target
        stamp = {"acknowledge": "acknowledged_at", "start": "started_at", "compensate": "compensated_at"}.get(action)
        fields = ["state", "updated_at", *changes]
        if stamp:
            setattr(order, stamp, now)
            fields.append(stamp)
        if action == "start" and order.acknowledged_at is None:
            order.acknowledged_at = now  # starting the work acknowledges it too
            fields.append("acknowledged_at")
        if target in (S.COMPENSATED, S.CLOSED, S.CANCELLED):
            order.ended_at = now
            fields.append("ended_at")
        for field, value in changes.items():
            setattr(order, field, value)
        if action == "acknowledge" and not order.assignee:
            order.assignee = actor  # whoever acknowledges an unassigned work order has it
            fields.append("assignee")
        order.save(update_fields=fields)
        if target in (S.COMPENSATED, S.CLOSED):
            # Its dead letters are taken care of; a replay under way still follows its task.
            DeadLetter.objects.filter(work_order=order, state=DeadLetterState.OPEN).update(
                state=DeadLetterState.RESOLVED, settled_at=now, updated_at=now)
        if target in (S.COMPENSATED, S.CLOSED, S.CANCELLED):
            _page(order, "resolve")
        record_audit(action=AuditAction.WORK_ORDER_TRANSITION, target=order, before=before, after=_snapshot(order),
                     reason=reason or action, actor=actor)
    return order


def acknowledge_work_order(*, work_order: WorkOrder | int, actor: str) -> WorkOrder:
    """The on-call has seen it: stops the acknowledge clock; assigns it to them if nobody has it."""
    return _move(work_order, action="acknowledge", actor=actor)


def start_work_order(*, work_order: WorkOrder | int, actor: str, runbook: str | None = None) -> WorkOrder:
    """Compensation is under way, following `runbook` when named."""
    changes = {} if runbook is None else {"runbook": text(runbook, field="runbook", max_length=200)}
    return _move(work_order, action="start", actor=actor, **changes)


def compensate_work_order(*, work_order: WorkOrder | int, actor: str, resolution: str) -> WorkOrder:
    """The business effects are repaired; `resolution` says how. Its open dead letters are resolved."""
    resolution = text(resolution, field="resolution", max_length=20000, required=True)
    return _move(work_order, action="compensate", actor=actor, resolution=resolution)


def close_work_order(*, work_order: WorkOrder | int, actor: str, resolution: str = "") -> WorkOrder:
    """Nothing (more) to compensate: closed without compensation. Its open dead letters are resolved."""
    resolution = text(resolution, field="resolution", max_length=20000)
    return _move(work_order, action="close", actor=actor, resolution=resolution)


def cancel_work_order(*, work_order: WorkOrder | int, actor: str, reason: str) -> WorkOrder:
    """Opened by mistake: cancelled; its dead letters stay open for another work order."""
    reason = text(reason, field="reason", max_length=2000, required=True)
    return _move(work_order, action="cancel", actor=actor, reason=reason, resolution=reason)


def change_work_order(*, work_order: WorkOrder | int, actor: str, assignee: str | None = None,
                      runbook: str | None = None, notes: str | None = None,
                      resolution: str | None = None) -> WorkOrder:
    """Change who has a live work order, the runbook it follows, its notes or the resolution
    drafted for its compensation (None: unchanged)."""
    changes = {field: text(value, field=field, max_length=limit)
               for field, value, limit in (("assignee", assignee, 200), ("runbook", runbook, 200),
                                           ("notes", notes, 20000), ("resolution", resolution, 20000))
               if value is not None}
    with transaction.atomic():
        order = locked(WorkOrder, work_order, kind="work_order")
        if order.state not in WORK_ORDER_LIVE:
            raise IllegalTransition(_("cannot change work order %(id)s: it is %(state)s") % {
                "id": order.pk, "state": state_words(S, order.state)}, kind="work_order", id=order.pk,
                                    from_state=order.state, to_state=order.state, action="change")
        changes = {field: value for field, value in changes.items() if getattr(order, field) != value}
        if not changes:
            return order
        before = {**_snapshot(order), "notes": order.notes}
        for field, value in changes.items():
            setattr(order, field, value)
        order.save(update_fields=[*changes, "updated_at"])
        record_audit(action=AuditAction.WORK_ORDER_CHANGE, target=order, before=before,
                     after={**_snapshot(order), "notes": order.notes}, actor=actor)
    return order
