"""Running runbook actions for work orders: request (idempotent by token), approve or reject
(four eyes for external actions), run. Each operator action is one transaction with one audit
entry. The action itself runs after the transaction that marks its run running, in one of its own
that commits its writes with the run's outcome (a failure undoes them), holding no lock of the run
or its work order while it talks to the outside world; a run whose process died in the action is
ended as failed by fail_interrupted_runbook_runs (the dead-letter consumer's periodic job)."""

from datetime import timedelta
from typing import Any

from django.db import IntegrityError, connection, transaction
from django.utils import timezone, translation
from django.utils.translation import gettext as _
from django.utils.translation import pgettext_lazy
from jsonschema.exceptions import best_match

from audit.choices import AuditAction
from audit.context import identity_of
from audit.services import record_audit
from compensation.choices import WORK_ORDER_LIVE, WorkOrderState, state_words
from compensation.inputs import locked, text
from compensation.runbooks.catalog import (
    ActionContext,
    ApprovalRequired,
    FourEyes,
    Runbook,
    RunbookAction,
    TokenReused,
    field_of,
    get_runbook,
    is_token,
)
from compensation.runbooks.models import RunbookRun, RunbookRunState
from compensation.work_orders.models import WorkOrder
from compensation.work_orders.services import start_work_order
from retryops.errors import BadInput, DomainError, IllegalTransition
from retryops.jsonsafe import UnstorableValue, make_storable, refuse_unstorable

R = RunbookRunState
# What a refusal says was asked, and what only some runs can be: "cannot approve runbook run 4 ...
# only a run that is waiting for approval can be approved".
VERBS = {"approve": pgettext_lazy("runbook run", "approve"), "reject": pgettext_lazy("runbook run", "reject"),
         "run": pgettext_lazy("runbook run", "run")}
DONE = {"approve": pgettext_lazy("runbook run", "approved"), "reject": pgettext_lazy("runbook run", "rejected"),
        "run": pgettext_lazy("runbook run", "run")}


def _snapshot(run: RunbookRun) -> dict:
    return {"state": run.state, "work_order": run.work_order_id, "runbook": run.runbook, "action": run.action,
            "external": run.external, "input": run.input, "requested_by": run.requested_by,
            "requester_identity": run.requester_identity, "approved_by": run.approved_by,
            "approver_identity": run.approver_identity, "run_by": run.run_by}


def _checked_input(action, value: Any) -> Any:
    try:
        refuse_unstorable(value, name="input")
    except UnstorableValue as exc:
        raise BadInput(str(exc), field=exc.path.split(" ")[0]) from None
    error = best_match(action.validator().iter_errors(value))
    if error is not None:
        where = field_of(error, "input")
        raise BadInput(f"{where}: {error.message}", field=where, action=action.name)
    return value


def check_runbook_request(*, runbook: str, action: str, input: Any) -> tuple[Runbook, RunbookAction, Any]:
    """The runbook, its action and the input checked against the action's schema, writing
    nothing: what a request would refuse, for a dry run."""
    book = get_runbook(runbook)
    step = book.action(action)
    return book, step, _checked_input(step, input)


def _refuse_state(run: RunbookRun, *, verb: str, allowed: tuple, to_state: str):
    if run.state not in allowed:
        # Evaluated for the state at hand only: the others' fields are empty.
        who = {R.RUNNING: lambda: _(" (run by %(who)s since %(since)s)") % {
                   "who": run.run_by, "since": f"{run.started_at:%Y-%m-%d %H:%M:%S %Z}"},
               R.SUCCEEDED: lambda: _(" (it ran already, by %(who)s)") % {"who": run.run_by},
               R.FAILED: lambda: _(" (it ran already, by %(who)s)") % {"who": run.run_by},
               R.REJECTED: lambda: _(" (by %(who)s)") % {"who": run.rejected_by}}.get(run.state, lambda: "")()
        raise IllegalTransition(
            _("cannot %(verb)s runbook run %(id)s: it is %(state)s%(who)s; only a run that is %(allowed)s can be "
              "%(done)s") % {"verb": VERBS[verb], "id": run.pk, "state": state_words(R, run.state), "who": who,
                             "allowed": state_words(R, *allowed), "done": DONE[verb]},
            kind="runbook_run", id=run.pk, from_state=run.state, to_state=to_state, action=verb)


def request_runbook_action(*, work_order: WorkOrder | int, runbook: str, action: str, input: Any, token: str,
                           actor: str) -> tuple[RunbookRun, bool]:
    """Ask to run `action` of `runbook` for a live work order with `input` (checked against the
    action's JSON Schema). An external action waits for approval; an internal one is ready to
    run. Returns (run, first): the same `token` again returns the first run unchanged and False
    (a double click runs once); a token already used for something else is refused."""
    token = text(token, field="token", required=True)
    if not is_token(token):
        raise BadInput(_("token must be 1 to 100 letters, digits or ._:@/+=-, got %(value)r") % {"value": token},
                       field="token")
    book, step, value = check_runbook_request(runbook=runbook, action=action, input=input)
    with transaction.atomic():
        order = locked(WorkOrder, work_order, kind="work_order")
        run = RunbookRun.objects.filter(token=token).first()
        if run is None:
            if order.state not in WORK_ORDER_LIVE:
                raise IllegalTransition(
                    _("cannot run a runbook action for work order %(id)s: it is %(state)s; only a live work order "
                      "(%(live)s) can be compensated") % {
                        "id": order.pk, "state": state_words(WorkOrderState, order.state),
                        "live": state_words(WorkOrderState, *WORK_ORDER_LIVE)}, kind="work_order", id=order.pk,
                    from_state=order.state, to_state=order.state, action="runbook")
            try:
                with transaction.atomic():
                    run = RunbookRun.objects.create(
                        work_order=order, runbook=book.name, action=step.name, external=step.external, input=value,
                        token=token, requested_by=actor, requester_identity=identity_of(actor),
                        state=R.REQUESTED if step.external else R.APPROVED)
            except IntegrityError:
                # The same token, requested for another work order at the same moment: the
                # unique index waited for that transaction, whose run is visible now.
                run = RunbookRun.objects.filter(token=token).first()
                if run is None:
                    raise
            else:
                record_audit(action=AuditAction.RUNBOOK_REQUEST, target=run, before=None, after=_snapshot(run),
                             actor=actor)
                return run, True
        if (run.work_order_id, run.runbook, run.action, run.input) != (order.pk, book.name, step.name, value):
            raise TokenReused(
                _("token %(token)r is already runbook run %(id)s (%(runbook)s / %(action)s for work order "
                  "%(order)s); use a new token for a different request") % {
                    "token": token, "id": run.pk, "runbook": run.runbook, "action": run.action,
                    "order": run.work_order_id}, token=token, run_id=run.pk)
        return run, False


def approve_runbook_action(*, run: RunbookRun | int, actor: str) -> RunbookRun:
    """A second operator approves an external action that waits for approval (also one marked
    external after it was requested); the requester cannot, whether as themselves or through an API
    client acting as them (four eyes compares identities; the database refuses it too)."""
    identity = identity_of(actor)
    with transaction.atomic():
        run = locked(RunbookRun, run, kind="runbook_run")
        # A run requested as internal whose action is marked external since waits, approved by nobody,
        # for the approval run_runbook_action asks for.
        now_external = (run.state == R.APPROVED and not run.approved_by
                        and get_runbook(run.runbook).action(run.action).external)
        if not now_external:
            _refuse_state(run, verb="approve", allowed=(R.REQUESTED,), to_state=R.APPROVED)
        if (identity.casefold() == run.requester_identity.casefold()
                or actor.casefold() == run.requested_by.casefold()):
            _refuse_requester(run, actor=actor, identity=identity)
        before = _snapshot(run)
        run.state, run.approved_by, run.approver_identity, run.approved_at = (
            R.APPROVED, actor, identity, timezone.now())
        run.save(update_fields=["state", "approved_by", "approver_identity", "approved_at", "updated_at"])
        record_audit(action=AuditAction.RUNBOOK_APPROVE, target=run, before=before, after=_snapshot(run), actor=actor)
    return run


def _refuse_requester(run: RunbookRun, *, actor: str, identity: str):
    details = {"run_id": run.pk, "actor": actor, "identity": identity}
    if actor.casefold() == run.requested_by.casefold():
        raise FourEyes(_("%(who)s requested runbook run %(id)s and cannot approve it too: another operator must "
                         "approve an action that changes things outside RetryOps") % {
                           "who": run.requested_by, "id": run.pk}, **details)
    # Another door to the same person: a second API client of the requester's service user, the
    # user behind the requesting client, or a client acting as the user who requested it.
    raise FourEyes(_("%(approver)s cannot approve runbook run %(id)s, requested by %(requester)s: one person "
                     "cannot both request and approve it; another operator must approve an action that changes "
                     "things outside RetryOps") % {
                       "approver": _acting(actor, identity), "id": run.pk,
                       "requester": _acting(run.requested_by, run.requester_identity)}, **details)


def _acting(actor: str, identity: str) -> str:
    if actor.casefold() == identity.casefold():
        return actor
    return _("%(actor)s (acting as %(user)s)") % {"actor": actor, "user": identity}


def reject_runbook_action(*, run: RunbookRun | int, actor: str, reason: str) -> RunbookRun:
    """Turn down (or withdraw) a run that has not started; `reason` says why."""
    reason = text(reason, field="reason", max_length=2000, required=True)
    with transaction.atomic():
        run = locked(RunbookRun, run, kind="runbook_run")
        _refuse_state(run, verb="reject", allowed=(R.REQUESTED, R.APPROVED), to_state=R.REJECTED)
        before = _snapshot(run)
        run.state, run.rejected_by, run.rejected_at, run.reject_reason = R.REJECTED, actor, timezone.now(), reason
        run.save(update_fields=["state", "rejected_by", "rejected_at", "reject_reason", "updated_at"])
        record_audit(action=AuditAction.RUNBOOK_REJECT, target=run, before=before, after=_snapshot(run),
                     reason=reason, actor=actor)
    return run


def _error_text(exc: BaseException) -> str:
    if isinstance(exc, DomainError):
        return f"{exc.code}: {exc}"
    return f"{type(exc).__name__}: {exc}"


def run_runbook_action(*, run: RunbookRun | int, actor: str) -> RunbookRun:
    """Run a ready action: running (with its audit entry) in a first transaction, the action
    outside any, then succeeded or failed with its result or error. A success moves an open or
    acknowledged work order to in progress (through start_work_order). An external action not
    yet approved, or a run that started already, is refused and nothing changes."""
    with transaction.atomic():
        run = locked(RunbookRun, run, kind="runbook_run")
        step = get_runbook(run.runbook).action(run.action)
        if run.state == R.REQUESTED:
            raise ApprovalRequired(_("runbook run %(id)s (%(runbook)s / %(action)s) changes things outside RetryOps "
                                     "and waits for another operator's approval") % {
                                       "id": run.pk, "runbook": run.runbook, "action": run.action}, run_id=run.pk)
        _refuse_state(run, verb="run", allowed=(R.APPROVED,), to_state=R.RUNNING)
        if step.external and not run.approved_by:
            raise ApprovalRequired(_("%(runbook)s / %(action)s is now marked external: runbook run %(id)s needs "
                                     "another operator's approval before it runs") % {
                                       "id": run.pk, "runbook": run.runbook, "action": run.action}, run_id=run.pk)
        order = locked(WorkOrder, run.work_order_id, kind="work_order")
        if order.state not in WORK_ORDER_LIVE:
            raise IllegalTransition(_("cannot run runbook run %(id)s: work order %(order)s is %(state)s") % {
                "id": run.pk, "order": order.pk, "state": state_words(WorkOrderState, order.state)},
                kind="work_order", id=order.pk, from_state=order.state, to_state=order.state, action="runbook")
        before = _snapshot(run)
        run.state, run.run_by, run.started_at = R.RUNNING, actor, timezone.now()
        run.save(update_fields=["state", "run_by", "started_at", "updated_at"])
        record_audit(action=AuditAction.RUNBOOK_RUN, target=run, before=before, after=_snapshot(run), actor=actor)
    context = ActionContext(run_id=run.pk, work_order_id=run.work_order_id, runbook=run.runbook, action=run.action,
                            input=run.input, token=run.token, requested_by=run.requested_by,
                            approved_by=run.approved_by, actor=actor)
    try:
        # What the action writes in the database commits with its run's outcome, or not at all:
        # one that raises halfway leaves none of its writes behind (what it sent outside cannot be
        # undone, which is why external actions wait for a second operator).
        with transaction.atomic():
            _hold_runner_lock(run.pk)
            # Its result and error are kept on the run: stored text is English whatever the language
            # of the operator who runs it (as retryops.language.in_stored_language does for jobs).
            with translation.override(None):
                result = step.function()(context)
            return _finish(run, actor=actor, result=result, error="")
    except Exception as exc:  # the action's failure is its outcome, kept on the run
        error = _error_text(exc)
    except BaseException as exc:  # Ctrl-C or a worker's shutdown: the run ends, then the process
        _finish_after_error(run, actor=actor, error=f"interrupted ({type(exc).__name__}): {INTERRUPTED_KEPT}")
        raise
    return _finish_after_error(run, actor=actor, error=error)


# What a failed or interrupted run's error says of the action's writes.
INTERRUPTED_KEPT = "the action's database writes were undone"
# The runner of a run holds this transaction-level lock (namespace, run id) while its action
# runs; a run left `running` whose lock is free has no runner (its process died).
RUNNER_LOCK = 0x52554E  # "RUN"
# A run is judged only this long after it started: between its start's commit and the action's
# transaction taking the lock, and between that rollback and the failure's commit, it holds none.
RUNNER_GRACE = timedelta(seconds=60)


def _hold_runner_lock(run_id: int) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [RUNNER_LOCK, run_id % 2**31])


def _finish_after_error(run: RunbookRun, *, actor: str, error: str) -> RunbookRun:
    """_finish with the error, on a connection the action may have broken (a server that went
    away): a broken one is replaced first, outside any caller's transaction."""
    if not connection.in_atomic_block:
        connection.close_if_unusable_or_obsolete()
    return _finish(run, actor=actor, result=None, error=error)


def fail_interrupted_runbook_runs(*, now=None) -> list[int]:
    """End as failed each run left `running` by a process that died in its action (its runner's
    lock is free): its action's database writes were rolled back with that process's transaction.
    Returns their ids; a run whose runner is still at it is left alone."""
    now = now or timezone.now()
    failed = []
    stale = (RunbookRun.objects.filter(state=R.RUNNING, started_at__lt=now - RUNNER_GRACE)
             .order_by("started_at").values_list("pk", flat=True)[:100])
    for run_id in stale:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SELECT pg_try_advisory_xact_lock(%s, %s)", [RUNNER_LOCK, run_id % 2**31])
            if not cursor.fetchone()[0]:
                continue
            if RunbookRun.objects.filter(pk=run_id, state=R.RUNNING).update(
                    state=R.FAILED, finished_at=now, updated_at=now,
                    error=f"interrupted: the process running the action stopped before it ended; {INTERRUPTED_KEPT}"):
                failed.append(run_id)
    return failed


def _finish(run: RunbookRun, *, actor: str, result: Any, error: str) -> RunbookRun:
    stored, repairs = make_storable(result) if result is not None else (None, [])
    state = R.FAILED if error else R.SUCCEEDED
    with transaction.atomic():
        updated = RunbookRun.objects.filter(pk=run.pk, state=R.RUNNING).update(
            state=state, result=stored, error=error[:20000].replace("\x00", "\ufffd"), repairs=repairs,
            finished_at=timezone.now(), updated_at=timezone.now())
        if updated and state == R.SUCCEEDED:
            order = locked(WorkOrder, run.work_order_id, kind="work_order")
            if order.state in (WorkOrderState.OPEN, WorkOrderState.ACKNOWLEDGED):
                start_work_order(work_order=order, actor=actor, runbook=run.runbook)
    run.refresh_from_db()
    return run
