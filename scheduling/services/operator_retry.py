"""The operator's "retry this resource": reset it and start a strict task on it, atomically."""

from django.db import transaction
from django.db.models import Q
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from audit.choices import AuditAction
from audit.services import record_audit
import resources.services
from resources.choices import ResourceState
from resources.models import Resource
from resources.selectors import describe_unavailability, when
from retryops.errors import BadInput
from retryops.masking import keep_masked_secrets
from scheduling.choices import TERMINAL_STATES, TaskState
from scheduling.errors import InstanceSucceeded, TaskLive
from scheduling.models import RetryPolicy, Task
from scheduling.selectors import last_task_on, live_task_on
from scheduling.services.tasks import (
    name_of,
    new_instance_audit,
    parse_payload,
    start_retry,
    start_retry_anywhere,
)


def _live(task: Task, current: Resource | None, name: str, *, last: Task | None = None) -> TaskLive:
    # The locked row says whether the task holds the resource and until when: what an operator
    # needs to decide whether to wait, run that task now or cancel it. No row: the task runs the
    # business instance that `last` ran on it, on another resource (see instance_to_run_again).
    # Whole sentences, one per case, so that each reads naturally once translated.
    names = {"task": task.pk, "flow": task.flow, "resource": name, "last": last.pk if last else None,
             "until": when(current.leased_until) if current else "", "attempt": task.attempt_count,
             "state": task.get_state_display().lower(), "next": when(task.next_run_at)}
    if current is None:
        where = (_("task %(task)s (%(flow)s), the last task on %(resource)s, has moved on to another resource")
                 if last is None or last.pk == task.pk else
                 _("task %(task)s (%(flow)s) runs the payload of task %(last)s, the last task on %(resource)s, "
                   "on another resource"))
    elif current.state == ResourceState.IN_USE and current.lease_token == task.held_lease_token:
        where = _("%(resource)s is in use by task %(task)s (%(flow)s) until %(until)s")
    else:
        where = _("%(resource)s is bound to task %(task)s (%(flow)s)")
    if task.state == TaskState.RUNNING:
        # Neither run-now nor cancel applies to a running attempt: its side effects are under way.
        doing = _("%(where)s: it is running attempt %(attempt)s; a retry now would run it twice: wait for that "
                  "attempt to end")
    else:
        doing = _("%(where)s: it is %(state)s and runs next at %(next)s; a retry now would run it twice: run that "
                  "task now or cancel it first")
    holds = (current is not None and current.state == ResourceState.IN_USE
             and current.lease_token == task.held_lease_token)
    return TaskLive(
        doing % {**names, "where": where % names},
        task_id=task.pk, state=task.state, next_run_at=task.next_run_at.isoformat() if task.next_run_at else None,
        holder=task.holder, until=current.leased_until.isoformat() if holds else None)


def check_available(current: Resource, name: str) -> None:
    """Refuse a strict retry of `current` that cannot have it now, before any question about what it
    would run (an operator must learn who holds it first): a task that has not finished is bound to
    it (TaskLive), or it is in use or quarantined (ResourceUnavailable, with the holder and until
    when). retry_resource asks under the resource's lock; the console's preview without one."""
    live = live_task_on(current)
    if live is not None:
        raise _live(live, current, name)
    if current.state not in (ResourceState.AVAILABLE, ResourceState.FAILED, ResourceState.DONE):
        raise describe_unavailability(current)


def instance_to_run_again(last: Task, name: str, *, as_new_instance: bool = False) -> Task | None:
    """The one guard of every start that runs the business instance `last` ran again (an
    operator's retry, strict or not, by resource or by task; a dead letter's replay, single, bulk or
    a runbook's; a probation probe): the instance's first task, the new run's first_run.
    Refused while a run of that instance is live (TaskLive, wherever it runs: `last` itself moved
    on to another resource, or an earlier copy waits) or has succeeded (InstanceSucceeded, also on
    another resource): a dead task is the last one on every resource it failed on, and each of
    those retried or probed would run it once more. With `as_new_instance` (the operator's
    explicit choice) a succeeded instance is run again as a new one: None, the new task is a first
    run and has an idempotency key of its own, and records the order it is a new instance of
    (order_of): the runs of every instance of one order count here, so two such choices at once,
    or a retry of an older instance beside a newer one, never make two live runs. An instance that never succeeded runs as
    a run of itself either way: its upstream may have applied part of it under its key. Its first
    task's row is locked, so two copies at once cannot both be made; call it in the copy's
    transaction."""
    first = Task.objects.select_for_update(of=("self",)).get(pk=last.first_run_id or last.pk)
    order = order_of(first)
    if order != first.pk:
        # Every instance of one order locks the order's first task (after its own: one lock
        # order), so two requests from two of its instances cannot both see "no live run".
        Task.objects.select_for_update(of=("self",)).filter(pk=order).first()
    runs = Task.objects.filter(Q(pk=order) | Q(first_run_id=order) | Q(new_instance_of_id=order))
    live = runs.exclude(state__in=TERMINAL_STATES).order_by("-id").first()
    if live is not None:
        raise _live(live, None, name, last=last)
    run = runs.filter(state=TaskState.SUCCEEDED).order_by("-id").first()
    if run is not None:
        if as_new_instance:
            return None
        names = {"task": run.pk, "flow": run.flow, "last": last.pk, "resource": name}
        message = _("task %(task)s (%(flow)s), the last task on %(resource)s, succeeded already: its payload again "
                    "would run it a second time") if run.pk == last.pk else _(
            "task %(task)s (%(flow)s), a run of the payload of task %(last)s, the last task on %(resource)s, "
            "succeeded already: its payload again would run it a second time")
        raise InstanceSucceeded(message % names, task_id=run.pk)
    return first


def order_of(task: Task) -> int:
    """The first task of the first instance of the order `task` runs: what a new instance of it
    records (Task.new_instance_of), so that every run of the order is one query away."""
    return task.new_instance_of_id or task.first_run_id or task.pk


def retry_resource(*, resource: Resource | int, actor: str, flow: str | None = None, payload=None,
                   policy: RetryPolicy | str | None = None, instance: Task | None = None,
                   idempotency_key: str | None = None, as_new_instance: bool = False) -> Task:
    """Reset a failed resource and start a task on it in strict mode, in one transaction: between
    the reset and the job no one else can claim it. Flow and payload default to those of the last
    task that ran on the resource. Refused first when it cannot have the resource (check_available:
    a task that has not finished is bound to it, TaskLive, for it would run beside the new one; or
    it is in use or quarantined, ResourceUnavailable); then when the last task's
    flow and payload (copied or given) would run a business instance that runs elsewhere now or
    has succeeded (InstanceSucceeded): see instance_to_run_again; with `as_new_instance` a
    succeeded one runs again as a new business instance, audited so. With `instance`, a task, the
    retry runs that task's business instance again (its flow and payload; its policy unless
    `policy` names one), whichever task ran on the resource last, under the same refusals (a
    task's retry by id, scheduling.services.task_retry). One operator action, one RESOURCE_RETRY
    audit entry. A repeated `idempotency_key` (a form's token: a double click) returns the task
    the first request started."""
    actor = name_of(actor, field="actor", what=gettext_lazy("who asks for the retry"))
    with transaction.atomic():
        task, previous, new_instance_of = _retry_on(resource=resource, actor=actor, flow=flow, payload=payload,
                                                    policy=policy, instance=instance, as_new_instance=as_new_instance,
                                                    idempotency_key=idempotency_key)
        if previous is not None:
            noted, why = new_instance_audit(new_instance_of)
            record_audit(action=AuditAction.RESOURCE_RETRY, target=task.resource, before={"state": previous},
                         after={"state": task.resource.state, "task": task.pk, "flow": task.flow,
                                "policy": task.policy.name, **noted},
                         reason="; ".join(filter(None, (f"retry this resource as task {task.pk}", why))), actor=actor)
        return task


def replay_on_resource(*, resource: Resource | int, actor: str, dead: Task) -> Task:
    """A dead letter's replay on the dead task's resource: retry_resource's start of `dead`'s business
    instance, under its refusals, with no audit entry of its own (the replay records one)."""
    actor = name_of(actor, field="actor", what=gettext_lazy("who asks for the retry"))
    with transaction.atomic():
        return _retry_on(resource=resource, actor=actor, flow=None, payload=None, policy=None, instance=dead,
                         as_new_instance=False, idempotency_key=None)[0]


def _retry_on(*, resource, actor, flow, payload, policy, instance, as_new_instance,
              idempotency_key) -> tuple[Task, str | None, int | None]:
    """retry_resource's work: the task, the resource's state before it (None: an earlier request
    with the same idempotency key started the task) and the order it runs as a new instance of."""
    # Lock order: the resource row, then the tasks that name it (the start locks it before it
    # writes such a task), so no live task can appear between this check and the new task.
    current = resources.services.lock_resource(resource)
    # After the lock: a second click waits for the first one's transaction, then finds its task
    # here instead of reading that task as the one in the way.
    started = _started_already(idempotency_key)
    if started is not None:
        return started, None, None
    name = f"{current.pool.resource_noun} {current.key}"
    check_available(current, name)
    # `again`: the task whose business instance this retry runs again, if it does.
    last, first_run, again = last_task_on(current), None, instance
    if instance is not None:
        flow, payload, policy = instance.flow, instance.payload, policy or instance.policy
    elif flow is None:
        if last is None:
            raise BadInput(_("no task has run on %(resource)s yet: name the flow") % {"resource": name},
                           field="flow")
        flow = last.flow
        payload = last.payload if payload is None else payload
        policy = policy or last.policy
    if instance is None and last is not None and payload is not None:
        # A client sends back the payload as the API showed it, masked: the mask keeps the
        # secret it stands for, or the retry would run (and store) "******", and would not be
        # recognised as the last task's business instance run again.
        payload = keep_masked_secrets(payload, last.payload, field="payload", error=BadInput)
    payload = parse_payload(payload)
    if again is None and last is not None and (flow, payload) == (last.flow, last.payload):
        # The last task's business instance again: copied here, or typed back as the console's
        # retry form shows it, or a dead letter's replay.
        again = last
    if again is not None:
        first_run = instance_to_run_again(again, name, as_new_instance=as_new_instance)
    # A succeeded instance run again as a new one, at the operator's word: its first task.
    new_instance_of = order_of(again) if again is not None and first_run is None else None
    previous = current.state
    if current.state in (ResourceState.FAILED, ResourceState.DONE):
        resources.services.reset_for_retry(resource=current, actor=actor)
    task = start_retry(resource=current, actor=actor, flow=flow, payload=payload, policy=policy,
                       first_run=first_run, new_instance_of=new_instance_of, idempotency_key=idempotency_key)
    return task, previous, new_instance_of


def _started_already(idempotency_key: str | None) -> Task | None:
    return Task.objects.filter(idempotency_key=idempotency_key).first() if idempotency_key else None


def retry_on_resource_or_another(*, resource: Resource | int, actor: str, flow: str | None = None, payload=None,
                                 policy: RetryPolicy | str | None = None, instance: Task | None = None,
                                 idempotency_key: str | None = None, as_new_instance: bool = False) -> Task:
    """A retry with strict mode off (the console's form unchecked, the API's "strict": false): a task
    that asks for `resource` but may run on another resource of its pool. Flow, payload and policy
    default to those of the last task that ran on the resource. With the flow and payload of
    `instance` (the task the form was filled from) or, without one, of the task bound to the
    resource that has not finished or else of that last task, it runs that
    business instance again, refused as instance_to_run_again refuses (a run of it is live, or has
    succeeded), in the transaction that starts it: as the strict retry is, `as_new_instance`
    included. A repeated `idempotency_key` returns the task the first request started."""
    actor = name_of(actor, field="actor", what=gettext_lazy("who asks for the retry"))
    with transaction.atomic():
        current = resources.services.lock_resource(resource)
        started = _started_already(idempotency_key)
        if started is not None:
            return started
        name = f"{current.pool.resource_noun} {current.key}"
        # The business instance a copy would run again: the form's task, else a task bound to the
        # resource that has not finished, else the last one that ran on it.
        source = instance or live_task_on(current) or last_task_on(current)
        if flow is None:
            if source is None:
                raise BadInput(_("no task has run on %(resource)s yet: name the flow") % {"resource": name},
                               field="flow")
            flow, policy = source.flow, policy or source.policy
            payload = source.payload if payload is None else payload
        if source is not None and payload is not None:
            payload = keep_masked_secrets(payload, source.payload, field="payload", error=BadInput)
        first_run = new_instance_of = None
        if source is not None and (flow, parse_payload(payload)) == (source.flow, source.payload):
            first_run = instance_to_run_again(source, name, as_new_instance=as_new_instance)
            new_instance_of = order_of(source) if first_run is None else None
        return start_retry_anywhere(resource=current, actor=actor, flow=flow, payload=payload, policy=policy,
                                    first_run=first_run, new_instance_of=new_instance_of,
                                    idempotency_key=idempotency_key)
