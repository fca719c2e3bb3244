"""Tasks' own transitions: starting one (validation of what it is asked to do, the task row, its
first wake-up), cancelling a waiting one, and running a waiting one now."""

import json
import uuid
from datetime import datetime, timedelta

from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from audit.choices import AuditAction
from audit.services import record_audit
import resources.selectors
import resources.services
from resources.errors import LeaseMismatch, ResourceNotFound
from resources.models import Resource, ResourcePool
from retryops.errors import BadInput, IllegalTransition, NotFound
from retryops.inputs import flag, record_id
from retryops.jsonsafe import UnstorableValue, check_text, clean_text, refuse_unstorable
from scheduling.choices import WAITING_STATES, TaskEventKind, TaskState
from scheduling.errors import BadPayload, BadPolicy, too_long
from scheduling.flows import get_flow
from scheduling.models import BatchConfig, RetryPolicy, Task
from scheduling.queueing import enqueue_after_commit
from scheduling.selectors import get_policy
from scheduling.services.events import emit

# Past a year a start time is a typo, and a lease or deadline computed from it may not fit a
# timestamp at all.
MAX_RUN_AHEAD = timedelta(days=366)
IDEMPOTENCY_KEY_LENGTH = Task._meta.get_field("idempotency_key").max_length
NAME_LENGTH = Task._meta.get_field("created_by").max_length


def parse_payload(payload) -> dict:
    """A payload is a JSON object PostgreSQL can store, given as a dict or as JSON text; what is
    wrong is named with its place (payload.items[2].price)."""
    if isinstance(payload, str):
        try:
            payload = json.loads(payload)
        # ValueError besides JSONDecodeError: a number of more digits than int() reads (4300).
        except (ValueError, RecursionError) as exc:
            raise BadPayload(_("payload is not JSON: %(error)s") % {"error": exc}, path="payload") from None
    if payload is None:
        return {}
    if not isinstance(payload, dict):
        raise BadPayload(_("payload must be a JSON object, got %(type)s") % {"type": type(payload).__name__},
                         path="payload")
    try:
        return refuse_unstorable(payload, name="payload")
    except UnstorableValue as exc:
        raise BadPayload(str(exc), path=exc.path) from None
    except RecursionError:
        raise BadPayload(_("payload is nested too deeply to store"), path="payload") from None


def name_of(value, *, field: str, what: str) -> str:
    """Who or what does something (created_by, actor): a non-empty line of text a column can hold.
    `what` is said in the refusal: pass it through gettext_lazy."""
    if not isinstance(value, str) or not value.strip():
        raise BadInput(_("%(field)s must name %(what)s, got %(value)r") % {"field": field, "what": what,
                                                                           "value": value}, field=field)
    problem = check_text(value)
    if problem:
        raise BadInput(_("%(field)s %(problem)s: %(value)r") % {"field": field, "problem": problem, "value": value},
                       field=field)
    return value.strip()[:NAME_LENGTH]


def _idempotency_key(key) -> str | None:
    if key is None or key == "":
        return None
    if not isinstance(key, str) or check_text(key):
        raise BadInput(_("idempotency_key must be text a column can hold (no NUL characters, no lone surrogates), "
                         "got %(value)r") % {"value": key}, field="idempotency_key")
    if len(key) > IDEMPOTENCY_KEY_LENGTH:
        raise BadInput(too_long("idempotency_key", len(key), IDEMPOTENCY_KEY_LENGTH), field="idempotency_key")
    return key


def _run_at(run_at, now: datetime) -> datetime | None:
    if run_at is None:
        return None
    if not isinstance(run_at, datetime) or timezone.is_naive(run_at):
        raise BadInput(_("run_at must be a date and time with a time zone, got %(value)r") % {"value": run_at},
                       field="run_at")
    if run_at - now > MAX_RUN_AHEAD:
        raise BadInput(_("run_at %(value)s is more than %(days)s days ahead") % {
            "value": run_at.isoformat(), "days": MAX_RUN_AHEAD.days}, field="run_at")
    return run_at


def _pool_name(pool_name):
    problem = check_text(pool_name) if isinstance(pool_name, str) else None
    if problem:
        raise BadInput(_("%(field)s %(problem)s: %(value)r") % {"field": "pool_name", "problem": problem,
                                                                 "value": pool_name}, field="pool_name")
    return pool_name


def _flow(flow) -> str:
    if not isinstance(flow, str) or check_text(flow):
        raise BadInput(_("flow must be a flow's name, got %(value)r") % {"value": flow}, field="flow")
    get_flow(flow)
    return flow


def _deadline(policy: RetryPolicy, now: datetime) -> datetime | None:
    if not policy.deadline_seconds:
        return None
    try:
        return now + timedelta(seconds=policy.deadline_seconds)
    except OverflowError:
        raise BadPolicy(_("policy %(policy)s: deadline_seconds %(seconds)g reaches past the end of the calendar") % {
            "policy": policy.name, "seconds": policy.deadline_seconds}, field="deadline_seconds",
            policy=policy.name) from None


def start_task(*, flow: str, pool_name: ResourcePool | int | str, created_by: str, payload=None,
               policy: RetryPolicy | str | None = None, resource: Resource | int | None = None,
               strict: bool = True, idempotency_key: str | None = None, run_at: datetime | None = None) -> Task:
    """An operator's or a client's start (API, console, command): write a task, audited as
    TASK_START, and enqueue its first attempt once the transaction commits. `resource` names the
    resource to run on (strict by default; a task that names none is never strict). A repeated
    `idempotency_key` returns the task it started the first time (and records nothing more)."""
    with transaction.atomic():
        task, created = _start(flow=flow, pool_name=pool_name, created_by=created_by, payload=payload, policy=policy,
                               resource=resource, strict=strict, idempotency_key=idempotency_key, run_at=run_at)
        if created:
            _audit_start(task)
    return task


def start_batch_task(*, config: BatchConfig, resource: Resource | None = None) -> Task:
    """One task of a batch tick, on a resource claimed now: `resource` (a failed-first candidate)
    or any of the pool. The system's own start: no audit entry (the operator's action was saving
    the config). Not strict: the config never named the resource, a failed-first tick only
    prefers it; its reservation is strict all the same (ResourceUnavailable if it is taken)."""
    return _start(flow=config.flow, pool_name=config.pool_id, payload=config.payload, policy=config.policy,
                  created_by=f"batch {config.name}", resource=resource, strict=False, reserve=True)[0]


def start_probe(*, resource: Resource, last: Task, first_run: Task | None) -> Task:
    """A probation probe of a quarantined resource: the last task's flow, payload and policy on its
    probe lease, as a run of that business instance. The system's own start: no audit entry."""
    return _start(flow=last.flow, pool_name=resource.pool_id, payload=last.payload, policy=last.policy,
                  created_by="probation", resource=resource, probe=True, first_run=first_run)[0]


def start_retry(*, resource: Resource, actor: str, flow: str, payload, policy: RetryPolicy | str | None,
                first_run: Task | None, new_instance_of: int | None, idempotency_key: str | None) -> Task:
    """The task of an operator's retry of `resource` (retry_resource): strict, on the resource
    reserved now. No audit entry of its own: the retry records one RESOURCE_RETRY."""
    return _start(flow=flow, pool_name=resource.pool, payload=payload, policy=policy, created_by=actor,
                  resource=resource, reserve=True, first_run=first_run, new_instance_of=new_instance_of,
                  idempotency_key=idempotency_key)[0]


def start_retry_anywhere(*, resource: Resource, actor: str, flow: str, payload, policy: RetryPolicy | str | None,
                         first_run: Task | None, new_instance_of: int | None, idempotency_key: str | None) -> Task:
    """The task of an operator's retry that may move (retry_on_resource_or_another): it asks for
    `resource` but may run on another of its pool; audited as TASK_START."""
    with transaction.atomic():
        task, created = _start(flow=flow, pool_name=resource.pool, payload=payload, policy=policy, created_by=actor,
                               resource=resource, strict=False, first_run=first_run,
                               new_instance_of=new_instance_of, idempotency_key=idempotency_key)
        if created:
            _audit_start(task)
    return task


def start_replay(*, dead: Task, actor: str, first_run: Task | None) -> Task:
    """A dead letter's replay on any resource of the dead task's pool: its business instance again.
    No audit entry of its own: the replay records one."""
    return _start(flow=dead.flow, pool_name=dead.pool, payload=dead.payload, policy=dead.policy, created_by=actor,
                  first_run=first_run)[0]


def _start(*, flow, pool_name, created_by, payload, policy, resource=None, strict=True, idempotency_key=None,
           run_at=None, reserve=False, probe=False, first_run=None, new_instance_of=None) -> tuple[Task, bool]:
    """The task every start writes, and whether this call wrote it (not: an earlier start with the
    same idempotency key). With `reserve`, the named resource (else any of the pool) is claimed in
    this transaction and held for the task. `first_run` is the first task of the business instance
    this one runs again; `new_instance_of` the first task of the order whose succeeded instance it
    runs again as a new one (a run of such an instance inherits it)."""
    now = timezone.now()
    flow = _flow(flow)
    payload = parse_payload(payload)
    created_by = name_of(created_by, field="created_by", what=gettext_lazy("who or what starts the task"))
    idempotency_key = _idempotency_key(idempotency_key)
    run_at = _run_at(run_at, now)
    strict = flag(strict, field="strict", error=BadInput)
    if idempotency_key:
        existing = Task.objects.filter(idempotency_key=idempotency_key).first()
        if existing is not None:
            return existing, False
    target_pool = resources.selectors.get_pool(_pool_name(pool_name))
    policy = get_policy(policy)
    deadline = _deadline(policy, now)
    pinned = None
    if resource is not None:
        pinned = resource if isinstance(resource, Resource) else resources.selectors.get_resource(
                          resource_id=record_id(resource, field="resource", error=BadInput))
        if pinned.pool_id != target_pool.pk:
            raise BadInput(_("resource %(key)s belongs to pool %(pool)s, not %(asked)s") % {
                "key": pinned.key, "pool": pinned.pool.name, "asked": target_pool.name}, field="resource")
    try:
        return _create_task(flow=flow, target_pool=target_pool, payload=payload, policy=policy,
                            strict=strict and pinned is not None, pinned=pinned, created_by=created_by,
                            idempotency_key=idempotency_key, run_at=run_at, deadline=deadline, now=now, probe=probe,
                            reserve=reserve, first_run=first_run,
                            new_instance_of=new_instance_of), True
    except IntegrityError:
        # Two starts with one key at once: the loser returns the winner's task.
        existing = Task.objects.filter(idempotency_key=idempotency_key).first() if idempotency_key else None
        if existing is None:
            raise
        return existing, False


def _create_task(*, flow, target_pool, payload, policy, strict, pinned, created_by, idempotency_key, run_at,
                 deadline, now, probe, reserve, first_run, new_instance_of) -> Task:
    with transaction.atomic():
        if pinned is not None:
            # Lock order: the resource row before any task row that names it, as retry_resource
            # does, so its "no live task on this resource" check cannot miss this one.
            resources.services.lock_resource(pinned.pk)
        task = Task.objects.create(
            flow=flow, pool=target_pool, payload=payload, policy=policy, strict=strict,
            requested_resource=pinned, pinned_resource=pinned, created_by=created_by, is_probe=probe,
            idempotency_key=idempotency_key or uuid.uuid4().hex,
            state=TaskState.SCHEDULED if run_at and run_at > now else TaskState.PENDING,
            next_run_at=max(run_at or now, now), deadline_at=deadline, first_run=first_run,
            new_instance_of_id=new_instance_of or (first_run.new_instance_of_id if first_run is not None else None),
        )
        # Only starts due now claim: their lease is the pool's.
        lease_seconds = target_pool.lease_seconds
        if probe:
            hold(task, resources.services.claim_for_probe(resource=pinned, holder=task.holder,
                                                          lease_seconds=lease_seconds))
        elif reserve:
            if pinned is not None:
                # Strict whatever the task is: a reservation of this resource that handed out
                # another would reserve what nobody asked for (a failed-first batch tick skips a
                # candidate taken meanwhile). A task that is not strict may move on later retries.
                lease = resources.services.claim_by_id(resource_id=pinned.pk, holder=task.holder, strict=True,
                                                       lease_seconds=lease_seconds, reserve=True)
            else:
                lease = resources.services.claim_next(pool=target_pool, holder=task.holder, lease_seconds=lease_seconds,
                                                      reserve=True)
            hold(task, lease)
        enqueue_after_commit(task)
    return task


def _audit_start(task: Task) -> None:
    # A run of an instance started as a new one inherits new_instance_of: only the start that
    # made it new says so.
    noted, why = new_instance_audit(task.new_instance_of_id if task.first_run_id is None else None)
    record_audit(action=AuditAction.TASK_START, target=task, before=None, after={**_started(task), **noted},
                 reason=why, actor=task.created_by)


def _started(task: Task) -> dict:
    """What an operator asked for when starting `task`, as its audit entry keeps it."""
    return {"flow": task.flow, "pool": task.pool.name, "payload": task.payload, "policy": task.policy.name,
            "resource": task.pinned_resource_id, "strict": task.strict, "state": task.state,
            "next_run_at": task.next_run_at, "idempotency_key": task.idempotency_key}


def new_instance_audit(first_id: int | None) -> tuple[dict, str]:
    """What an audit entry adds, and its reason, for a task that runs the flow and payload of the
    succeeded business instance whose first task is `first_id` again as a new instance (the
    operator's explicit choice, as_new_instance); nothing for any other start."""
    if first_id is None:
        return {}, ""
    return ({"new_instance": True, "runs_again": first_id},
            f"run again as a new business instance: task {first_id}'s succeeded already, and the operator chose to "
            f"run its flow and payload again (as_new_instance)")


def hold(task: Task, lease: Resource) -> None:
    task.resource, task.pinned_resource, task.held_lease_token = lease, lease, lease.lease_token
    task.save(update_fields=["resource", "pinned_resource", "held_lease_token"])


def _locked_task(task: Task | int) -> Task:
    task_id = task.pk if isinstance(task, Task) else record_id(task, field="task", error=BadInput)
    locked = Task.objects.select_for_update(of=("self",)).select_related("pool").filter(pk=task_id).first()
    if locked is None:
        raise NotFound(_("no task with id %(id)s") % {"id": task_id}, code="task_not_found", task_id=task_id)
    return locked


# Whole sentences per action, so that each translates as one.
_NOT_WAITING = {
    "cancel": gettext_lazy("cannot cancel task %(task)s: it is %(state)s; only pending, scheduled or retrying "
                           "tasks can be"),
    "run now": gettext_lazy("cannot run now task %(task)s: it is %(state)s; only pending, scheduled or retrying "
                            "tasks can be"),
}


def _waiting_or_refuse(task: Task, action: str) -> None:
    if task.state not in WAITING_STATES:
        raise IllegalTransition(
            _NOT_WAITING[action] % {"task": task.pk, "state": task.get_state_display().lower()},
            task_id=task.pk, state=task.state, action=action.replace(" ", "_"))


def cancel_task(*, task: Task | int, actor: str, reason: str = "") -> Task:
    """Cancel a task waiting for its next attempt: it never runs again, and a lease it holds
    (reserved, or held for its retry) goes back unused. A running attempt cannot be cancelled
    (its flow is already doing its side effects): cancel the retry once it has ended."""
    actor = name_of(actor, field="actor", what=gettext_lazy("who cancels the task"))
    if reason is not None and not isinstance(reason, str):
        raise BadInput(_("reason must be text, got %(type)s") % {"type": type(reason).__name__}, field="reason")
    reason = clean_text(reason.strip()) if reason else ""
    with transaction.atomic():
        # Lock order, as in begin_attempt: the task, then its resource.
        task = _locked_task(task)
        _waiting_or_refuse(task, "cancel")
        before = {"state": task.state}
        if task.held_lease_token:
            try:
                resources.services.release_unused(
                    resource=task.resource_id, lease_token=task.held_lease_token, actor=actor,
                    reason=f"{task.holder} cancelled" + (f": {reason}" if reason else ""))
            except (LeaseMismatch, ResourceNotFound):
                pass  # swept already
        task.state, task.finished_at, task.held_lease_token = TaskState.CANCELLED, timezone.now(), None
        task.save(update_fields=["state", "finished_at", "held_lease_token"])
        emit(task, TaskEventKind.CANCELLED, attempt_number=task.attempt_count, actor=actor, reason=reason,
             resource=task.resource_id)
        record_audit(action=AuditAction.TASK_CANCEL, target=task, before=before,
                     after={"state": task.state, "finished_at": task.finished_at}, reason=reason, actor=actor)
    return task


def run_task_now(*, task: Task | int, actor: str) -> Task:
    """Pull a waiting task's next attempt forward to now and enqueue it once this commits. The
    wake-up it had arrives later and finds that attempt already taken."""
    actor = name_of(actor, field="actor", what=gettext_lazy("who runs the task"))
    with transaction.atomic():
        task = _locked_task(task)
        _waiting_or_refuse(task, "run now")
        was = task.next_run_at
        before = {"state": task.state, "next_run_at": was}
        task.next_run_at = timezone.now()
        if task.state == TaskState.SCHEDULED:
            task.state = TaskState.PENDING
        task.save(update_fields=["state", "next_run_at"])
        emit(task, TaskEventKind.RUN_NOW, attempt_number=task.attempt_count + 1, actor=actor,
             was_due_at=was.isoformat())
        record_audit(action=AuditAction.TASK_RUN_NOW, target=task, before=before,
                     after={"state": task.state, "next_run_at": task.next_run_at}, actor=actor)
        enqueue_after_commit(task)
    return task
