"""The operator's "retry this resource": reset it and start a strict task on it, atomically."""

from django.db import transaction
from django.db.models import Q

from audit.choices import AuditAction
from audit.services import record_audit
from resources import services as pool
from resources.choices import ResourceState
from resources.models import Resource
from resources.selectors import when
from scheduling.choices import TaskState
from scheduling.errors import BadInput, TaskLive
from scheduling.models import RetryPolicy, Task
from scheduling.selectors import last_task_on, live_task_on
from scheduling.services.tasks import name_of, parse_payload, start_task


def _live(task: Task, current: Resource | None, name: str, *, last: Task | None = None) -> TaskLive:
    # The locked row says whether the task holds the resource and until when: what an operator
    # needs to decide whether to wait, run that task now or cancel it. No row: the task runs the
    # business instance that `last` ran on it, on another resource (see instance_to_run_again).
    if current is None:
        where = (f"{task.holder} ({task.flow}), the last task on {name}, has moved on to another resource"
                 if last is None or last.pk == task.pk else
                 f"{task.holder} ({task.flow}) runs the payload of {last.holder}, the last task on {name}, "
                 f"on another resource")
    elif current.state == ResourceState.IN_USE and current.lease_holder == task.holder:
        where = f"{name} is in use by {task.holder} ({task.flow}) until {when(current.leased_until)}"
    else:
        where = f"{name} is bound to {task.holder} ({task.flow})"
    if task.state == TaskState.RUNNING:
        # Neither run-now nor cancel applies to a running attempt: its side effects are under way.
        doing = f"it is running attempt {task.attempt_count}"
        advice = "wait for that attempt to end"
    else:
        doing = f"it is {task.get_state_display().lower()} and runs next at {when(task.next_run_at)}"
        advice = "run that task now or cancel it first"
    holds = current is not None and current.state == ResourceState.IN_USE and current.lease_holder == task.holder
    return TaskLive(
        f"{where}: {doing}; a retry now would run it twice: {advice}",
        task_id=task.pk, state=task.state, next_run_at=task.next_run_at.isoformat() if task.next_run_at else None,
        holder=task.holder, until=current.leased_until.isoformat() if holds else None)


def instance_to_run_again(last: Task, name: str) -> Task:
    """The first task of the business instance `last` ran, which a copy of its payload (an
    operator's retry, a probation probe) runs again; refused while a run of that instance is live
    (wherever it runs: `last` itself moved on to another resource, or an earlier copy waits) or
    has succeeded (also on another resource): a dead task is the last one on every resource it
    failed on, and each of those retried or probed would run it once more. Its first task's row
    is locked, so two copies at once cannot both be made; call it in the copy's transaction."""
    first = Task.objects.select_for_update(of=("self",)).get(pk=last.repeats_id or last.pk)
    run = Task.objects.filter(Q(pk=first.pk) | Q(repeats=first)).exclude(
        state__in=(TaskState.DEAD, TaskState.CANCELLED)).order_by("-id").first()
    if run is not None and run.state == TaskState.SUCCEEDED:
        who = f"{run.holder} ({run.flow}), the last task on {name}," if run.pk == last.pk else (
            f"{run.holder} ({run.flow}), a run of the payload of {last.holder}, the last task on {name},")
        raise BadInput(f"{who} succeeded already: its payload again would run it a second time", field="payload",
                       task_id=run.pk)
    if run is not None:
        raise _live(run, None, name, last=last)
    return first


def retry_resource(*, resource: Resource | int, actor: str, flow: str | None = None, payload=None,
                   policy: RetryPolicy | str | None = None, audit: bool = True, instance: Task | None = None) -> Task:
    """Reset a failed resource and start a task on it in strict mode, in one transaction: between
    the reset and the job no one else can claim it. Flow and payload default to those of the last
    task that ran on the resource. Refused while a task that has not finished is bound to the
    resource (TaskLive): that task would run beside the new one; likewise when the last task's
    flow and payload (copied or given) would run a business instance that runs elsewhere now or
    has succeeded (BadInput): see instance_to_run_again. With `instance`, a task, the retry runs
    that task's business instance again (its flow and payload; its policy unless `policy` names
    one), whichever task ran on the resource last, under the same refusals (a task's retry by id,
    scheduling.services.task_retry). With `audit` False it records no audit entry: the caller's
    own action (a dead letter's replay) records one of its own."""
    actor = name_of(actor, field="actor", what="who asks for the retry")
    with transaction.atomic():
        # Lock order: the resource row, then the tasks that name it (start_task locks it before it
        # writes such a task), so no live task can appear between this check and the new task.
        current = pool.lock_resource(resource)
        name = f"{current.pool.resource_noun} {current.key}"
        live = live_task_on(current)
        if live is not None:
            raise _live(live, current, name)
        last, repeats = last_task_on(current), None
        if instance is not None:
            flow, payload, policy = instance.flow, instance.payload, policy or instance.policy
            repeats = instance_to_run_again(instance, name)
        elif flow is None:
            if last is None:
                raise BadInput(f"no task has run on {name} yet: name the flow", field="flow")
            flow = last.flow
            payload = last.payload if payload is None else payload
            policy = policy or last.policy
        payload = parse_payload(payload)
        if repeats is None and last is not None and (flow, payload) == (last.flow, last.payload):
            # The last task's business instance again: copied here, or typed back as the console's
            # retry form shows it, or a dead letter's replay.
            repeats = instance_to_run_again(last, name)
        previous = current.state
        # One operator action, one audit entry: the reset and the start inside it record none.
        if current.state in (ResourceState.FAILED, ResourceState.DONE):
            pool.reset(resource=current, actor=actor, reason="retry this resource", audit=False)
        elif current.state != ResourceState.AVAILABLE:
            raise pool.describe_unavailability(current)
        task = start_task(flow=flow, pool_name=current.pool, payload=payload, policy=policy, created_by=actor,
                          resource=current, strict=True, reserve=True, audit=False, repeats=repeats)
        if audit:
            record_audit(action=AuditAction.RESOURCE_RETRY, target=current, before={"state": previous},
                         after={"state": task.resource.state, "task": task.pk, "flow": task.flow,
                                "policy": task.policy.name},
                         reason=f"retry this resource as task {task.pk}", actor=actor)
        return task
