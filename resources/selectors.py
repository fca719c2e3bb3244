"""The pool's reads, shared by the services, the console, the API and telemetry. Nothing here writes.

The describe_* functions read the world as it is now and build the error that explains it; a
caller that wrote first must remember that the world may have changed since (see claim_by_id)."""

import uuid
from datetime import datetime

from django.db.models import Count, QuerySet
from django.utils import timezone

from resources.choices import EventKind, FailureCategory, ResourceState
from resources.errors import (
    InvalidInput,
    LeaseMismatch,
    PoolExhausted,
    PoolNotFound,
    ResourceNotFound,
    ResourceUnavailable,
)
from resources.models import Resource, ResourceEvent, ResourcePool
from retryops import inputs
from retryops.jsonsafe import check_text


def record_id(value, *, field: str) -> int:
    """`value` as a primary key, else InvalidInput naming `field` (retryops.inputs.record_id)."""
    return inputs.record_id(value, field=field, error=InvalidInput)


def _lookup_text(value, *, field: str) -> str:
    # A name looked up, not stored, still goes to PostgreSQL: a NUL or a lone surrogate in it
    # fails the query (psycopg refuses to send it) instead of finding nothing.
    problem = check_text(value)
    if problem:
        raise InvalidInput(f"{field} {problem}: {value!r}", field=field)
    return value


def when(moment: datetime | None) -> str:
    """A moment as an operator reads it: the time alone today, the date too otherwise."""
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
    if isinstance(pool, str):
        lookup = {"name": _lookup_text(pool, field="pool")}
    else:
        lookup = {"pk": record_id(pool, field="pool")}
    try:
        return ResourcePool.objects.get(**lookup)
    except ResourcePool.DoesNotExist:
        raise PoolNotFound(f"no resource pool {pool!r}", pool=pool) from None


def pool_id_of(pool: ResourcePool | int | str) -> int:
    """A pool's id without reading the pool when given one: an unknown id simply matches nothing."""
    if isinstance(pool, ResourcePool):
        return pool.pk
    return get_pool(pool).pk if isinstance(pool, str) else record_id(pool, field="pool")


def get_resource(*, resource_id: int | None = None, pool: ResourcePool | int | str | None = None,
                 key: str | None = None) -> Resource:
    """A resource by primary key, or by pool and key, with its pool loaded."""
    queryset = Resource.objects.select_related("pool")
    if resource_id is not None:
        try:
            return queryset.get(pk=record_id(resource_id, field="resource_id"))
        except Resource.DoesNotExist:
            raise ResourceNotFound(f"no resource with id {resource_id}", resource_id=resource_id) from None
    if pool is None or key is None:
        raise InvalidInput("name a resource by resource_id, or by pool and key", field="resource_id")
    pool = get_pool(pool)
    if not isinstance(key, str):
        raise InvalidInput(f"key must be text, got {type(key).__name__}", field="key")
    try:
        return queryset.get(pool=pool, key=_lookup_text(key, field="key"))
    except Resource.DoesNotExist:
        raise ResourceNotFound(f"pool {pool.name} has no {pool.resource_noun} with key {key!r}",
                               pool=pool.name, key=key) from None


def describe_unavailability(resource: Resource) -> ResourceUnavailable:
    """Why a named resource cannot be claimed, in an operator's words. A resource that is claimable
    again (available, failed) was taken and freed while a claim ran: that is reported as in use,
    which a retry gets past, never as a reason to give up."""
    name = f"{resource.pool.resource_noun} {resource.key}"
    state = resource.state
    if state == ResourceState.IN_USE:
        message, reason = f"{name} is in use by {resource.lease_holder} until {when(resource.leased_until)}", "in_use"
    elif state == ResourceState.QUARANTINED:
        message = f"{name} is quarantined since {when(resource.quarantined_at)}: {resource.quarantine_reason}"
        reason = "quarantined"
    elif state == ResourceState.DONE:
        message = f"{name} was consumed by a successful run at {when(resource.last_success_at)} and is done"
        reason = "done"
    else:
        message = f"{name} was taken and freed again while this claim ran; try again"
        reason = "in_use"
    return ResourceUnavailable(message, reason=reason, resource_id=resource.pk)


def pool_state_counts(*, pool: ResourcePool | int | str | None = None) -> dict[int, dict[str, int]]:
    """How many resources each pool (or the one named) has in each state: {pool_id: {state: n}};
    states without resources are left out."""
    queryset = Resource.objects.all()
    if pool is not None:
        queryset = queryset.filter(pool=get_pool(pool))
    counts: dict[int, dict[str, int]] = {}
    for pool_id, state, n in queryset.values_list("pool_id", "state").annotate(n=Count("id")).order_by():
        counts.setdefault(pool_id, {})[state] = n
    return counts


def describe_exhaustion(pool_id: int) -> PoolExhausted | PoolNotFound:
    """Why claim_next found nothing in the pool: what its resources are doing, or that it does not exist."""
    try:
        pool = ResourcePool.objects.get(pk=pool_id)
    except ResourcePool.DoesNotExist:
        return PoolNotFound(f"no resource pool with id {pool_id}", pool=pool_id)
    counts = pool_state_counts(pool=pool).get(pool.pk, {})
    if not counts:
        return PoolExhausted(f"pool {pool.name} has no {pool.resource_noun}s at all", pool=pool.name, counts={})
    busy = ", ".join(f"{n} {ResourceState(state).label.lower()}" for state, n in sorted(counts.items()))
    return PoolExhausted(f"pool {pool.name} has no available {pool.resource_noun}: {busy}", pool=pool.name,
                         counts=counts)


def describe_lease_mismatch(resource_id: int, lease_token: uuid.UUID | str) -> LeaseMismatch | ResourceNotFound:
    """Why a lease token does not hold the resource: it expired and was swept, was released, or
    was never granted; and what the resource is doing now."""
    try:
        resource = get_resource(resource_id=resource_id)
    except ResourceNotFound as missing:
        return missing
    name = f"{resource.pool.resource_noun} {resource.key}"
    try:
        token = lease_token if isinstance(lease_token, uuid.UUID) else uuid.UUID(str(lease_token))
    except ValueError:
        token = None
    events = ResourceEvent.objects.filter(resource_id=resource_id, lease_token=token) if token else None
    expired = events.filter(kind=EventKind.LEASE_EXPIRED).first() if token else None
    if token is None:
        why, sentence = "never_granted", f"lease token {lease_token!r} is not a UUID"
    elif expired is not None:
        why, sentence = "expired", f"lease {token} on {name} expired and was swept back at {when(expired.created_at)}"
    elif events.exists():
        why, sentence = "released", f"lease {token} on {name} was already released"
    else:
        why, sentence = "never_granted", f"lease {token} was never granted on {name}"
    if resource.state == ResourceState.IN_USE:
        now = f"it is now held by {resource.lease_holder}"
    else:
        now = f"it is now {resource.get_state_display().lower()}"
    return LeaseMismatch(f"{sentence}; {now}", why=why, resource_id=resource_id, lease_token=str(lease_token))


def recently_failed(*, pool: ResourcePool | int | str, since: datetime) -> QuerySet[Resource]:
    """A pool's resources whose last use failed retryably at `since` or later, newest failure first
    (resource_failed_recent_idx answers it): the failed-first scheduler's candidates. Slice it, or
    iterate it to filter by the failure's text."""
    return Resource.objects.filter(
        pool_id=pool_id_of(pool), state=ResourceState.FAILED, last_failure_category=FailureCategory.RETRYABLE,
        last_failure_at__gte=since,
    ).order_by("-last_failure_at")


def due_for_probe(*, now: datetime | None = None, limit: int = 100) -> list[Resource]:
    """Quarantined resources whose probation cooldown is over, longest due first, with their pools."""
    now = now or timezone.now()
    limit = inputs.whole_number(limit, field="limit", error=InvalidInput)
    return list(Resource.objects.select_related("pool").filter(
        state=ResourceState.QUARANTINED, probe_after__lte=now).order_by("probe_after")[:limit])


def timeline(*, resource: Resource | int, limit: int | None = None) -> list[ResourceEvent]:
    """A resource's timeline, newest first (resource_event_timeline_idx)."""
    resource_id = resource.pk if isinstance(resource, Resource) else record_id(resource, field="resource")
    events = ResourceEvent.objects.filter(resource_id=resource_id).order_by("-id")
    if limit is None:
        return list(events)
    return list(events[:inputs.whole_number(limit, field="limit", error=InvalidInput)])
