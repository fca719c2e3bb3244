"""Starting tasks: validation of what a task is asked to do, the task row, and its first wake-up."""

import json
import math
import uuid
from datetime import datetime, timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from resources import services as pool
from resources.models import Resource, ResourcePool
from scheduling.choices import TaskState
from scheduling.errors import TaskError
from scheduling.flows import UnknownFlow, get_flow
from scheduling.models import RetryPolicy, Task
from scheduling.queueing import enqueue_after_commit


def parse_payload(payload) -> dict:
    """A payload is a JSON object, given as a dict or as JSON text."""
    if isinstance(payload, str):
        try:
            payload = json.loads(payload)
        except json.JSONDecodeError as exc:
            raise TaskError(f"payload is not JSON: {exc}") from None
    if payload is None:
        return {}
    if not isinstance(payload, dict):
        raise TaskError(f"payload must be a JSON object, got {type(payload).__name__}")
    try:
        json.dumps(payload)
    except (TypeError, ValueError) as exc:
        raise TaskError(f"payload cannot be stored as JSON: {exc}") from None
    return payload


def get_policy(policy: RetryPolicy | str | None) -> RetryPolicy:
    if isinstance(policy, RetryPolicy):
        return policy
    name = policy or getattr(settings, "RETRYOPS_DEFAULT_POLICY", "default")
    try:
        return RetryPolicy.objects.get(name=name)
    except RetryPolicy.DoesNotExist:
        raise TaskError(f"no retry policy {name!r}; load them with manage.py load_retry_policies") from None


def start_task(*, flow: str, pool_name: ResourcePool | int | str, created_by: str, payload=None,
               policy: RetryPolicy | str | None = None, resource: Resource | int | None = None,
               strict: bool = True, reserve: bool = False, claim_now: bool = False,
               idempotency_key: str | None = None, run_at: datetime | None = None, probe: bool = False) -> Task:
    """Write a task and enqueue its first attempt once the transaction commits.

    `resource` names the resource to run on (strict by default). With `reserve`, that resource is
    claimed now, in this transaction, and held for the task; with `claim_now`, any resource of the
    pool is. A repeated `idempotency_key` returns the task it started the first time."""
    try:
        get_flow(flow)
    except UnknownFlow as exc:
        raise TaskError(str(exc)) from None
    payload = parse_payload(payload)
    if not created_by:
        raise TaskError("created_by must say who or what starts the task")
    if idempotency_key:
        existing = Task.objects.filter(idempotency_key=idempotency_key).first()
        if existing is not None:
            return existing
    target_pool = pool.get_pool(pool_name)
    policy = get_policy(policy)
    pinned = None
    if resource is not None:
        pinned = resource if isinstance(resource, Resource) else pool.get_resource(resource_id=resource)
        if pinned.pool_id != target_pool.pk:
            raise TaskError(f"resource {pinned.key} belongs to pool {pinned.pool.name}, not {target_pool.name}")
    now = timezone.now()
    try:
        return _create_task(flow=flow, target_pool=target_pool, payload=payload, policy=policy, strict=strict,
                            pinned=pinned, created_by=created_by, idempotency_key=idempotency_key, run_at=run_at,
                            now=now, probe=probe, reserve=reserve, claim_now=claim_now)
    except IntegrityError:
        # Two starts with one key at once: the loser returns the winner's task.
        existing = Task.objects.filter(idempotency_key=idempotency_key).first() if idempotency_key else None
        if existing is None:
            raise
        return existing


def _create_task(*, flow, target_pool, payload, policy, strict, pinned, created_by, idempotency_key, run_at, now,
                 probe, reserve, claim_now) -> Task:
    with transaction.atomic():
        task = Task.objects.create(
            flow=flow, pool=target_pool, payload=payload, policy=policy, strict=strict,
            requested_resource=pinned, pinned_resource=pinned, created_by=created_by[:200], is_probe=probe,
            idempotency_key=idempotency_key or uuid.uuid4().hex,
            state=TaskState.SCHEDULED if run_at and run_at > now else TaskState.PENDING,
            next_run_at=max(run_at or now, now),
            deadline_at=now + timedelta(seconds=policy.deadline_seconds) if policy.deadline_seconds else None,
        )
        # A lease taken now must last until the first attempt is due, and then some.
        lease_seconds = math.ceil((task.next_run_at - now).total_seconds()) + target_pool.lease_seconds
        if probe:
            hold(task, pool.claim_for_probe(resource=pinned, holder=task.holder, lease_seconds=lease_seconds))
        elif reserve or claim_now:
            if pinned is not None:
                lease = pool.claim_by_id(resource_id=pinned.pk, holder=task.holder, strict=strict,
                                         lease_seconds=lease_seconds, reserve=True)
            else:
                lease = pool.claim_next(pool=target_pool, holder=task.holder, lease_seconds=lease_seconds,
                                        reserve=True)
            hold(task, lease)
        enqueue_after_commit(task)
    return task


def hold(task: Task, lease: Resource) -> None:
    task.resource, task.pinned_resource, task.held_lease_token = lease, lease, lease.lease_token
    task.save(update_fields=["resource", "pinned_resource", "held_lease_token"])
