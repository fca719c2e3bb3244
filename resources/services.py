"""The only code that changes resource state. Admin, API, jobs and commands call these.

The hot paths (claim_next, claim_by_id, release) are each one SQL statement: a data-modifying
CTE that checks the current state, changes the row, and appends the timeline event. That is one
round trip and one implicit transaction when called alone, and it joins the caller's
transaction when called inside `transaction.atomic()`. When the statement changes no row, a
second, read-only query finds out why, so the error can name what was wrong.
"""

import json
import random
import time
import uuid
from dataclasses import dataclass
from datetime import datetime

from django.core.serializers.json import DjangoJSONEncoder
from django.db import connection, transaction
from django.db.models import Count
from django.utils import timezone

from resources import sql
from resources.choices import EventKind, FailureCategory, Outcome, ResourceState
from resources.classification import Classification, classify, error_text
from resources.errors import (
    IllegalTransition,
    LeaseMismatch,
    PoolExhausted,
    PoolNotFound,
    ResourceError,
    ResourceNotFound,
    ResourceUnavailable,
)
from resources.models import Resource, ResourceEvent, ResourcePool

LEASE_EXPIRED_REASON = "lease expired"
MAX_REASON_LENGTH = 2000


@dataclass(frozen=True)
class ExpiredLease:
    """A lease the sweeper took back: which resource, whose lease it was, and when it ran out."""

    resource_id: int
    lease_token: uuid.UUID
    holder: str
    leased_until: datetime


def _json(details: dict | None) -> str:
    return json.dumps(details or {}, cls=DjangoJSONEncoder)


# pool id -> (lowest id, highest id, when read). The random start needs the pool's id range;
# asking for it on every claim would cost more than the claim when one pool holds most rows
# (the planner then walks the primary key through the other pools' rows), so each process
# reads it at most every BOUNDS_TTL seconds. Stale bounds are harmless: the scan runs forward
# from the start without an upper bound, and falls back to the pool's beginning.
BOUNDS_TTL = 30.0
_pool_bounds: dict[int, tuple[int, int, float]] = {}


def _random_start(pool_id: int) -> int:
    now = time.monotonic()
    cached = _pool_bounds.get(pool_id)
    if cached is None or now - cached[2] > BOUNDS_TTL:
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT min(id), max(id) FROM {sql.RESOURCE_TABLE} WHERE pool_id = %s::bigint", [pool_id])
            low, high = cursor.fetchone()
        if low is None:
            return 0
        cached = _pool_bounds[pool_id] = (low, high, now)
    return random.randint(cached[0], cached[1])


# Fields whose database value needs decoding (Django loads jsonb as text and leaves the
# decoding to the field), by position in sql.COLUMNS.
_DECODED = [(n, f) for n, f in enumerate(Resource._meta.concrete_fields) if hasattr(f, "from_db_value")]


def _one(statement: str, params: dict) -> Resource | None:
    with connection.cursor() as cursor:
        cursor.execute(statement, params)
        row = cursor.fetchone()
    if row is None:
        return None
    values = list(row)
    for n, field in _DECODED:
        values[n] = field.from_db_value(values[n], None, connection)
    return Resource.from_db(connection.alias, sql.COLUMNS, values)


def _lease_seconds(value: int | None) -> int | None:
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value <= 0):
        raise ValueError(f"lease_seconds must be a positive whole number of seconds, got {value!r}")
    return value


def _holder(holder: str) -> str:
    if not isinstance(holder, str) or not holder.strip():
        raise ValueError("holder must name who takes the resource (for example 'task 812'), got an empty value")
    return holder.strip()[:200]


def _when(moment: datetime | None) -> str:
    if moment is None:
        return "an unknown time"
    local = timezone.localtime(moment)
    if local.date() == timezone.localdate():
        return f"{local:%H:%M:%S} {local.tzname()}"
    return f"{local:%Y-%m-%d %H:%M:%S} {local.tzname()}"


def get_pool(pool: ResourcePool | int | str) -> ResourcePool:
    """The pool itself, from an instance, a primary key or a name."""
    if isinstance(pool, ResourcePool):
        return pool
    lookup = {"pk": pool} if isinstance(pool, int) else {"name": pool}
    try:
        return ResourcePool.objects.get(**lookup)
    except ResourcePool.DoesNotExist:
        raise PoolNotFound(f"no resource pool {pool!r}") from None


def get_resource(*, resource_id: int | None = None, pool: ResourcePool | int | str | None = None,
                 key: str | None = None) -> Resource:
    """A resource by primary key, or by pool and key, with its pool loaded."""
    queryset = Resource.objects.select_related("pool")
    if resource_id is not None:
        try:
            return queryset.get(pk=resource_id)
        except Resource.DoesNotExist:
            raise ResourceNotFound(f"no resource with id {resource_id}") from None
    if pool is None or key is None:
        raise ValueError("name a resource by resource_id, or by pool and key")
    pool = get_pool(pool)
    try:
        return queryset.get(pool=pool, key=key)
    except Resource.DoesNotExist:
        raise ResourceNotFound(f"pool {pool.name} has no {pool.resource_noun} with key {key!r}") from None


def _resource_id(resource: Resource | int) -> int:
    return resource.pk if isinstance(resource, Resource) else int(resource)


def describe_unavailability(resource: Resource) -> ResourceUnavailable:
    """Why a named resource cannot be claimed, in an operator's words."""
    noun = resource.pool.resource_noun
    name = f"{noun} {resource.key}"
    state = resource.state
    if state == ResourceState.IN_USE:
        message = f"{name} is in use by {resource.lease_holder} until {_when(resource.leased_until)}"
    elif state == ResourceState.QUARANTINED:
        message = f"{name} is quarantined since {_when(resource.quarantined_at)}: {resource.quarantine_reason}"
    elif state == ResourceState.DONE:
        message = f"{name} was consumed by a successful run at {_when(resource.last_success_at)} and is done"
    else:
        message = f"{name} is {resource.get_state_display().lower()}"
    return ResourceUnavailable(message, code=state, resource_id=resource.pk)


def _exhausted(pool_id: int) -> PoolExhausted | PoolNotFound:
    try:
        pool = ResourcePool.objects.get(pk=pool_id)
    except ResourcePool.DoesNotExist:
        return PoolNotFound(f"no resource pool with id {pool_id}")
    counts = dict(
        Resource.objects.filter(pool_id=pool_id).values_list("state").annotate(n=Count("id")).order_by()
    )
    if not counts:
        return PoolExhausted(f"pool {pool.name} has no {pool.resource_noun}s at all")
    busy = ", ".join(f"{n} {ResourceState(state).label.lower()}" for state, n in sorted(counts.items()))
    return PoolExhausted(f"pool {pool.name} has no available {pool.resource_noun}: {busy}")


def claim_next(*, pool: ResourcePool | int | str, holder: str, lease_seconds: int | None = None,
               actor: str | None = None, details: dict | None = None) -> Resource:
    """Take one available resource of the pool; concurrent claimers never wait or collide (SKIP LOCKED)."""
    holder = _holder(holder)
    # A pool id goes straight into the statement; an unknown one is diagnosed after it finds nothing.
    pool_id = pool.pk if isinstance(pool, ResourcePool) else pool if isinstance(pool, int) else get_pool(pool).pk
    params = {
        "pool_id": pool_id,
        "token": uuid.uuid4(),
        "holder": holder,
        "lease_seconds": _lease_seconds(lease_seconds),
        "actor": actor or holder,
        "details": _json(details),
        "start_id": _random_start(pool_id),
    }
    resource = _one(sql.CLAIM_NEXT, params)
    if resource is None:
        # Everything past the random start was taken or locked: scan from the pool's beginning.
        resource = _one(sql.CLAIM_NEXT, {**params, "start_id": 0})
    if resource is None:
        raise _exhausted(pool_id)
    return resource


def claim_by_id(*, holder: str, resource_id: int | None = None, pool: ResourcePool | int | str | None = None,
                key: str | None = None, strict: bool = True, lease_seconds: int | None = None,
                actor: str | None = None, details: dict | None = None) -> Resource:
    """Take the named resource. Strict (the default): if it cannot be had, raise ResourceUnavailable
    and never hand out another one. Not strict: fall back to claim_next on the same pool."""
    holder = _holder(holder)
    try:
        resource = get_resource(resource_id=resource_id, pool=pool, key=key)
    except ResourceNotFound as missing:
        if strict or pool is None:
            raise ResourceUnavailable(str(missing), code="missing", resource_id=resource_id) from None
        return claim_next(pool=pool, holder=holder, lease_seconds=lease_seconds, actor=actor, details=details)
    params = {
        "resource_id": resource.pk,
        "token": uuid.uuid4(),
        "holder": holder,
        "lease_seconds": _lease_seconds(lease_seconds),
        "actor": actor or holder,
        "details": _json(details),
    }
    claimed = _one(sql.CLAIM_BY_ID, params)
    if claimed is not None:
        return claimed
    if strict:
        raise describe_unavailability(get_resource(resource_id=resource.pk))
    return claim_next(pool=resource.pool_id, holder=holder, lease_seconds=lease_seconds, actor=actor, details=details)


def _lease_mismatch(resource_id: int, lease_token: uuid.UUID | str) -> ResourceError:
    resource = get_resource(resource_id=resource_id)
    name = f"{resource.pool.resource_noun} {resource.key}"
    expired = ResourceEvent.objects.filter(
        resource_id=resource_id, kind=EventKind.LEASE_EXPIRED, lease_token=lease_token
    ).first()
    if expired is not None:
        why = f"lease {lease_token} on {name} expired and was swept back at {_when(expired.created_at)}"
    elif ResourceEvent.objects.filter(resource_id=resource_id, lease_token=lease_token).exists():
        why = f"lease {lease_token} on {name} was already released"
    else:
        why = f"lease {lease_token} was never granted on {name}"
    if resource.state == ResourceState.IN_USE:
        now = f"it is now held by {resource.lease_holder}"
    else:
        now = f"it is now {resource.get_state_display().lower()}"
    return LeaseMismatch(f"{why}; {now}")


def release(*, resource: Resource | int, lease_token: uuid.UUID | str, outcome: str,
            error: BaseException | str | None = None, classification: Classification | None = None,
            actor: str | None = None, details: dict | None = None, probation_seconds: int | None = None) -> Resource:
    """Give back a claimed resource with the outcome of its use, updating its statistics.

    A failure is classified (unless the caller already did, with its own patterns): retryable
    leaves the resource failed, where a retry may pick it again; non-retryable quarantines it.
    Only the current lease token releases; a late or foreign one raises LeaseMismatch.
    `probation_seconds` puts a quarantine on probation: one probe after that cooldown."""
    resource_id = _resource_id(resource)
    try:
        token = lease_token if isinstance(lease_token, uuid.UUID) else uuid.UUID(str(lease_token))
    except ValueError:
        raise LeaseMismatch(f"lease token {lease_token!r} is not a UUID") from None
    if outcome not in Outcome.values:
        raise ValueError(f"outcome must be one of {', '.join(Outcome.values)}, got {outcome!r}")
    params = {"resource_id": resource_id, "token": token, "actor": actor or "", "details": _json(details)}
    if outcome == Outcome.SUCCESS:
        released = _one(sql.RELEASE_SUCCESS, params)
    else:
        if classification is None:
            if error is None:
                raise ValueError("a failure needs the error that caused it")
            classification = classify(error)
        reason = (error_text(error) if error is not None else classification.text)[:MAX_REASON_LENGTH]
        new_state = ResourceState.FAILED if classification.retryable else ResourceState.QUARANTINED
        released = _one(
            sql.RELEASE_FAILURE,
            {**params, "new_state": new_state, "reason": reason or "unknown error", "category": classification.category,
             "cooldown": probation_seconds if new_state == ResourceState.QUARANTINED and probation_seconds else None},
        )
    if released is None:
        raise _lease_mismatch(resource_id, token)
    return released


def extend_lease(*, resource: Resource | int, lease_token: uuid.UUID | str, seconds: int | None = None) -> Resource:
    """Heartbeat: push the lease's end `seconds` (default: the pool's lease length) from now."""
    resource_id = _resource_id(resource)
    seconds = _lease_seconds(seconds)
    with transaction.atomic():
        current = _locked(resource_id)
        if current.state != ResourceState.IN_USE or str(current.lease_token) != str(lease_token):
            raise _lease_mismatch(resource_id, lease_token)
        current.leased_until = timezone.now() + timezone.timedelta(seconds=seconds or current.pool.lease_seconds)
        current.save(update_fields=["leased_until"])
    return current


def hold_after_failure(*, resource: Resource | int, lease_token: uuid.UUID | str, error: BaseException | str,
                       classification: Classification, hold_until: datetime, actor: str = "") -> Resource:
    """Record a retryable failure but keep the lease until `hold_until`, so the same task's retry
    finds the resource waiting for it and neither claim_next nor a scheduler takes it meanwhile."""
    if not classification.retryable:
        raise IllegalTransition("a non-retryable failure cannot hold its resource for a retry")
    resource_id = _resource_id(resource)
    reason = (error_text(error) or "unknown error")[:MAX_REASON_LENGTH]
    with transaction.atomic():
        current = _locked(resource_id)
        if current.state != ResourceState.IN_USE or str(current.lease_token) != str(lease_token):
            raise _lease_mismatch(resource_id, lease_token)
        now = timezone.now()
        current.failure_count += 1
        current.consecutive_failures += 1
        current.last_failure_reason, current.last_failure_category, current.last_failure_at = (
            reason, classification.category, now)
        current.leased_until = max(hold_until, now)
        current.save(update_fields=["failure_count", "consecutive_failures", "last_failure_reason",
                                    "last_failure_category", "last_failure_at", "leased_until"])
        ResourceEvent.objects.create(
            resource=current, kind=EventKind.HELD_FOR_RETRY, actor=actor, reason=reason,
            category=classification.category, lease_token=current.lease_token,
            details={"held_until": current.leased_until.isoformat()},
        )
    return current


def release_unused(*, resource: Resource | int, lease_token: uuid.UUID | str, actor: str, reason: str) -> Resource:
    """Give back a lease that was never used (its task ended before running on it): no success
    or failure is counted; the resource returns as failed if its last use failed, else available.
    A probe's lease returns the resource to its quarantine."""
    resource_id = _resource_id(resource)
    with transaction.atomic():
        current = _locked(resource_id)
        if current.state != ResourceState.IN_USE or str(current.lease_token) != str(lease_token):
            raise _lease_mismatch(resource_id, lease_token)
        token = current.lease_token
        if current.quarantined_at is not None:
            cooldown = timezone.timedelta(seconds=max(current.probation_cooldown_seconds, 1))
            current.state, current.probe_after = ResourceState.QUARANTINED, timezone.now() + cooldown
        else:
            current.state = ResourceState.FAILED if current.consecutive_failures else ResourceState.AVAILABLE
        current.lease_token, current.lease_holder, current.leased_at, current.leased_until = None, "", None, None
        current.save(update_fields=["state", "probe_after", "lease_token", "lease_holder", "leased_at", "leased_until"])
        ResourceEvent.objects.create(resource=current, kind=EventKind.RELEASED_UNUSED, actor=actor, reason=reason,
                                     lease_token=token)
    return current


MAX_PROBATION_SECONDS = 7 * 24 * 3600


def claim_for_probe(*, resource: Resource | int, holder: str, now: datetime | None = None,
                    lease_seconds: int | None = None) -> Resource:
    """Lease a quarantined resource whose probation cooldown is over, for its one probe."""
    holder = _holder(holder)
    lease_seconds = _lease_seconds(lease_seconds)
    now = now or timezone.now()
    with transaction.atomic():
        current = _locked(resource)
        if current.state != ResourceState.QUARANTINED or current.probe_after is None or current.probe_after > now:
            raise IllegalTransition(
                f"{current.pool.resource_noun} {current.key} is not due for a probe: it is "
                f"{current.get_state_display().lower()}" + (f", probe after {_when(current.probe_after)}"
                                                           if current.probe_after else "")
            )
        current.state, current.probe_after = ResourceState.IN_USE, None
        current.lease_token, current.lease_holder = uuid.uuid4(), holder
        current.leased_at = now
        current.leased_until = now + timezone.timedelta(seconds=lease_seconds or current.pool.lease_seconds)
        current.save(update_fields=["state", "probe_after", "lease_token", "lease_holder", "leased_at", "leased_until"])
        ResourceEvent.objects.create(resource=current, kind=EventKind.PROBE_CLAIMED, actor=holder,
                                     reason=current.quarantine_reason, lease_token=current.lease_token)
    return current


def end_probe(*, resource: Resource | int, lease_token: uuid.UUID | str, succeeded: bool,
              error: BaseException | str | None = None, actor: str = "") -> Resource:
    """A probe's outcome: success returns the resource to the pool; failure quarantines it again
    with twice the cooldown (at most a week)."""
    resource_id = _resource_id(resource)
    now = timezone.now()
    with transaction.atomic():
        current = _locked(resource_id)
        if current.state != ResourceState.IN_USE or str(current.lease_token) != str(lease_token):
            raise _lease_mismatch(resource_id, lease_token)
        token, reason = current.lease_token, current.quarantine_reason
        current.lease_token, current.lease_holder, current.leased_at, current.leased_until = None, "", None, None
        if succeeded:
            current.state, current.quarantine_reason, current.quarantined_at = ResourceState.AVAILABLE, "", None
            current.success_count += 1
            current.consecutive_failures, current.last_success_at = 0, now
            current.probation_cooldown_seconds = 0
            kinds = [(EventKind.RELEASED_SUCCESS, ""), (EventKind.UNQUARANTINED, "probe succeeded")]
        else:
            text = (error_text(error) if error is not None else "probe failed")[:MAX_REASON_LENGTH]
            current.state, current.quarantined_at = ResourceState.QUARANTINED, now
            current.failure_count += 1
            current.consecutive_failures += 1
            current.last_failure_reason, current.last_failure_category = text, FailureCategory.NON_RETRYABLE
            current.last_failure_at = now
            current.probation_cooldown_seconds = min(max(current.probation_cooldown_seconds, 1) * 2, MAX_PROBATION_SECONDS)
            current.probe_after = now + timezone.timedelta(seconds=current.probation_cooldown_seconds)
            kinds = [(EventKind.RELEASED_FAILURE, text),
                     (EventKind.QUARANTINED, f"probe failed; next probe after {current.probation_cooldown_seconds} s")]
        current.save(update_fields=[
            "state", "lease_token", "lease_holder", "leased_at", "leased_until", "quarantine_reason", "quarantined_at",
            "success_count", "failure_count", "consecutive_failures", "last_success_at", "last_failure_reason",
            "last_failure_category", "last_failure_at", "probation_cooldown_seconds", "probe_after"])
        for kind, why in kinds:
            ResourceEvent.objects.create(resource=current, kind=kind, actor=actor, reason=why, lease_token=token,
                                         details={"probe": True, "quarantine_reason": reason})
    return current


def _locked(resource: Resource | int) -> Resource:
    resource_id = _resource_id(resource)
    current = Resource.objects.select_for_update(of=("self",)).select_related("pool").filter(pk=resource_id).first()
    if current is None:
        raise ResourceNotFound(f"no resource with id {resource_id}")
    return current


def _locked_in(resource: Resource | int, action: str, allowed: tuple[str, ...]) -> Resource:
    """The locked row, if its state allows `action`; else IllegalTransition naming both."""
    current = _locked(resource)
    if current.state not in allowed:
        raise _illegal(current, action, allowed)
    return current


def _illegal(resource: Resource, action: str, allowed: tuple[str, ...]) -> IllegalTransition:
    names = [ResourceState(s).value.replace("_", " ") for s in allowed]
    states = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"
    return IllegalTransition(
        f"cannot {action} {resource.pool.resource_noun} {resource.key}: it is "
        f"{resource.get_state_display().lower()}; only {states} ones can be"
    )


def _event(resource: Resource, kind: str, *, actor: str, reason: str = "", details: dict | None = None) -> None:
    ResourceEvent.objects.create(resource=resource, kind=kind, actor=actor, reason=reason, details=details or {})


def _actor(actor: str) -> str:
    if not isinstance(actor, str) or not actor.strip():
        raise ValueError("actor must name who does this (a user name, a task, a command)")
    return actor.strip()[:200]


def reset(*, resource: Resource | int, actor: str, reason: str = "") -> Resource:
    """Make a failed or consumed resource available again. Counters, reasons and history stay."""
    actor = _actor(actor)
    allowed = (ResourceState.FAILED, ResourceState.DONE)
    with transaction.atomic():
        current = _locked_in(resource, "reset", allowed)
        previous = current.state
        current.state = ResourceState.AVAILABLE
        current.save(update_fields=["state"])
        _event(current, EventKind.RESET, actor=actor, reason=reason, details={"from": previous})
    return current


def quarantine(*, resource: Resource | int, actor: str, reason: str) -> Resource:
    """Take a resource out of rotation until someone releases it from quarantine."""
    actor = _actor(actor)
    if not isinstance(reason, str) or not reason.strip():
        raise ValueError("a quarantine needs a reason that operators will read")
    allowed = (ResourceState.AVAILABLE, ResourceState.FAILED, ResourceState.DONE)
    with transaction.atomic():
        current = _locked_in(resource, "quarantine", allowed)
        current.state = ResourceState.QUARANTINED
        current.quarantine_reason = reason.strip()[:MAX_REASON_LENGTH]
        current.quarantined_at = timezone.now()
        current.save(update_fields=["state", "quarantine_reason", "quarantined_at"])
        _event(current, EventKind.QUARANTINED, actor=actor, reason=current.quarantine_reason)
    return current


def unquarantine(*, resource: Resource | int, actor: str, reason: str = "") -> Resource:
    """Put a quarantined resource back in the pool; the quarantine stays in its timeline."""
    actor = _actor(actor)
    allowed = (ResourceState.QUARANTINED,)
    with transaction.atomic():
        current = _locked_in(resource, "unquarantine", allowed)
        previous = current.quarantine_reason
        current.state = ResourceState.AVAILABLE
        current.quarantine_reason = ""
        current.quarantined_at = current.probe_after = None
        current.probation_cooldown_seconds = 0
        current.save(update_fields=["state", "quarantine_reason", "quarantined_at", "probe_after",
                                    "probation_cooldown_seconds"])
        _event(current, EventKind.UNQUARANTINED, actor=actor, reason=reason, details={"quarantine_reason": previous})
    return current


def sweep_expired_leases(*, now: datetime | None = None, actor: str = "lease sweeper",
                         limit: int = 1000) -> list[ExpiredLease]:
    """Take back resources whose lease ran out (their holder died or hung): they become failed,
    retryable, "lease expired", counted as a failure, each with a timeline event."""
    with connection.cursor() as cursor:
        cursor.execute(
            sql.SWEEP,
            {"now": now or timezone.now(), "limit": limit, "actor": actor, "reason": LEASE_EXPIRED_REASON},
        )
        rows = cursor.fetchall()
    return [ExpiredLease(resource_id=r[0], lease_token=r[1], holder=r[2], leased_until=r[3]) for r in rows]


def create_pool(*, name: str, resource_noun: str = "resource", lease_seconds: int = 300,
                consume_on_success: bool = False, description: str = "") -> ResourcePool:
    """A new, empty pool; a taken name raises ValueError naming it."""
    if ResourcePool.objects.filter(name=name).exists():
        raise ValueError(f"a resource pool named {name!r} exists already")
    return ResourcePool.objects.create(name=name, resource_noun=resource_noun, lease_seconds=_lease_seconds(lease_seconds),
                                       consume_on_success=consume_on_success, description=description)


def add_resources(*, pool: ResourcePool | int | str, resources: list[dict]) -> list[Resource]:
    """Add resources ({"key", "label", "attributes"}) to a pool, all or none; duplicate keys are named."""
    target = get_pool(pool)
    keys = [item.get("key") for item in resources]
    if any(not isinstance(key, str) or not key.strip() for key in keys):
        raise ValueError("every resource needs a non-empty key")
    repeated = sorted({key for key in keys if keys.count(key) > 1})
    taken = sorted(Resource.objects.filter(pool=target, key__in=keys).values_list("key", flat=True))
    problems = ([f"pool {target.name} already has {', '.join(taken)}"] if taken else []) + (
        [f"keys given twice: {', '.join(repeated)}"] if repeated else [])
    if problems:
        raise ValueError("; ".join(problems))
    with transaction.atomic():
        return Resource.objects.bulk_create(
            Resource(pool=target, key=item["key"].strip(), label=item.get("label", ""),
                     attributes=item.get("attributes") or {})
            for item in resources
        )
