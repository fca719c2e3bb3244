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
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.db import IntegrityError, connection, transaction
from django.db.models.functions import Now
from django.utils import timezone
from django.utils.translation import gettext, pgettext, pgettext_lazy

from audit import context as audit_context
from audit.choices import AuditAction
from audit.services import record_audit
from resources import sql
from resources.choices import (
    EventKind,
    FailureCategory,
    LeaseKind,
    Outcome,
    ResourceState,
)
from resources.classification import Classification, classify, error_text
from resources.errors import LeaseMismatch, ResourceChanged, ResourceNotFound, ResourceUnavailable
from resources.models import Resource, ResourceEvent, ResourcePool
from resources.selectors import (
    describe_exhaustion,
    describe_lease_mismatch,
    describe_unavailability,
    get_pool,
    get_resource,
    listing,
    lookup_text,
    no_such_resource,
    not_a_uuid_sentence,
    pool_id_of,
    record_id,
    resource_version,
    when,
)
from retryops import inputs
from retryops.clock import db_now
from retryops.jsonsafe import clean_text
from retryops.masking import keep_masked_secrets, mask_secrets
from retryops.errors import BadInput, IllegalTransition

LEASE_EXPIRED_REASON = "lease expired"
LEASE_EXPIRED_UNUSED_REASON = "lease expired unused"
MAX_REASON_LENGTH = 2000
MAX_INTEGER = inputs.MAX_INTEGER
# A resource a claim may take by name: a failed one too, which is how an operator retries it.
CLAIMABLE = (ResourceState.AVAILABLE, ResourceState.FAILED)


@dataclass(frozen=True)
class ExpiredLease:
    """A lease the sweeper took back: which resource, whose lease it was, when it ran out, and
    whether it was being used (only then was a failure counted)."""

    resource_id: int
    lease_token: uuid.UUID
    holder: str
    leased_until: datetime
    lease_kind: str = LeaseKind.USE
    used: bool = True


# Input: the interfaces (serializers, forms, command options) check types, lengths and what a
# column cannot hold (retryops.jsonsafe, retryops.inputs) before they call a service; internal
# callers pass typed values. What stays here are the rules: how long a lease may be, and the
# ranges of the numbers the statements cast.


def _whole(value, *, field: str, minimum: int = 1, maximum: int = MAX_INTEGER) -> int:
    return inputs.whole_number(value, field=field, minimum=minimum, maximum=maximum, error=BadInput)


def _details(value: dict | None) -> str:
    """A claim's or a release's details as the timeline keeps them: with the values of secret keys
    masked (the timeline is for people; nothing ever reads a secret back from it)."""
    return json.dumps(mask_secrets(value or {}), cls=DjangoJSONEncoder)


def _lease_seconds(value: int | None, *, field: str = "lease_seconds") -> int | None:
    """A lease's length: never longer than RETRYOPS_MAX_LEASE_SECONDS, so one careless client
    cannot take a resource out of its pool for years, past every sweep."""
    return None if value is None else _whole(value, field=field, maximum=settings.RETRYOPS_MAX_LEASE_SECONDS)


def _error_reason(error: BaseException | str) -> str:
    # What a flow raised, after its side effects: stored as well as it can be, never refused.
    return clean_text(error_text(error) or "unknown error")[:MAX_REASON_LENGTH]


def _token(lease_token: uuid.UUID | str, resource_id: int) -> uuid.UUID:
    try:
        return lease_token if isinstance(lease_token, uuid.UUID) else uuid.UUID(str(lease_token))
    except ValueError:
        raise LeaseMismatch(not_a_uuid_sentence(lease_token), why="never_granted",
                            resource_id=resource_id, lease_token=str(lease_token)) from None


# pool id -> (lowest available id, highest available id, when read). The random start needs the
# pool's id range. The read is two probes of resource_available_idx, cheap whatever the size of
# this pool or its neighbours; the cache only saves its round trip in a long-lived process (a
# forking worker starts each job with an empty one). Stale bounds are harmless: the scan runs
# forward from the start without an upper bound, and falls back to the pool's beginning.
BOUNDS_TTL = 30.0
_pool_bounds: dict[int | str, tuple[int, int, float]] = {}


def _random_start(pool: dict) -> int:
    """A random start for a claim in the pool, drawn per claim so that a pool's resources share the
    work; `pool` names it as the statements do ({"pool_id": ..., "pool_name": ...}, one of them None)."""
    now = time.monotonic()
    cached = _pool_bounds.get(pool["pool_id"] or pool["pool_name"])
    if cached is None or now - cached[2] > BOUNDS_TTL:
        with connection.cursor() as cursor:
            cursor.execute(sql.AVAILABLE_BOUNDS, pool)
            low, high = cursor.fetchone()
        if low is None:
            return 0
        cached = _pool_bounds[pool["pool_id"] or pool["pool_name"]] = (low, high, now)
    return random.randint(cached[0], cached[1])


# Fields whose database value needs decoding (Django loads jsonb as text and leaves the
# decoding to the field), by position in sql.COLUMNS.
_DECODED = [(n, f) for n, f in enumerate(Resource._meta.concrete_fields) if hasattr(f, "from_db_value")]


def _one(statement: str, params: dict) -> Resource | None:
    """The row a hot statement changed, with its pool (its name loaded, the rest read when asked for)."""
    with connection.cursor() as cursor:
        cursor.execute(statement, params)
        row = cursor.fetchone()
    if row is None:
        return None
    values, pool_name = list(row[:-1]), row[-1]
    for n, field in _DECODED:
        values[n] = field.from_db_value(values[n], None, connection)
    resource = Resource.from_db(connection.alias, sql.COLUMNS, values)
    resource.pool = ResourcePool.from_db(connection.alias, ["id", "name"], [resource.pool_id, pool_name])
    return resource


def _resource_id(resource: Resource | int) -> int:
    return resource.pk if isinstance(resource, Resource) else record_id(resource, field="resource")


def _claim_params(*, holder: str, lease_seconds: int | None, actor: str | None, details: dict | None,
                  reserve: bool) -> dict:
    return {
        "token": uuid.uuid4(),
        "holder": holder,
        "lease_seconds": _lease_seconds(lease_seconds),
        "actor": actor or holder,
        "details": _details(details),
        "lease_kind": LeaseKind.RESERVATION if reserve else LeaseKind.USE,
    }


def _lease_shown(resource: Resource) -> dict:
    """A lease as an audit entry keeps it (never its token: that is the holder's to release with)."""
    return {"state": resource.state, "lease_holder": resource.lease_holder, "leased_until": resource.leased_until,
            "lease_kind": resource.lease_kind}


def _audited(action: str, resource: Resource, *, before: dict, actor: str | None, reason: str = "") -> Resource:
    record_audit(action=action, target=resource, before=before, after=_lease_shown(resource), reason=reason,
                 actor=actor or None)
    return resource


def claim_next(*, pool: ResourcePool | int | str, holder: str, lease_seconds: int | None = None,
               actor: str | None = None, details: dict | None = None, reserve: bool = False) -> Resource:
    """Take one available resource of the pool; concurrent claimers never wait or collide (SKIP LOCKED).
    With `reserve`, the lease is taken ahead of the attempt that will use it: until extend_lease(use=True)
    says it is in use, the sweeper takes it back without counting a failure. Its record is the
    timeline row it writes; an external system's (client_claim_next) also names the key and request."""
    params = _claim_params(holder=holder, lease_seconds=lease_seconds, actor=actor, details=details,
                           reserve=reserve)
    # A pool id or name goes straight into the statement; an unknown one is diagnosed after it
    # finds nothing.
    named = {"pool_id": None, "pool_name": lookup_text(pool, field="pool")} if isinstance(pool, str) else \
        {"pool_id": pool_id_of(pool), "pool_name": None}
    params = {**params, **named, "start_id": _random_start(named)}
    resource = _one(sql.CLAIM_NEXT, params)
    if resource is None:
        # Everything past the random start was taken or locked: scan from the pool's beginning.
        resource = _one(sql.CLAIM_NEXT, {**params, "start_id": 0})
    if resource is None:
        raise describe_exhaustion(named["pool_id"] or get_pool(pool).pk)
    return resource


def claim_by_id(*, holder: str, resource_id: int | None = None, pool: ResourcePool | int | str | None = None,
                key: str | None = None, strict: bool = True, lease_seconds: int | None = None,
                actor: str | None = None, details: dict | None = None, reserve: bool = False) -> Resource:
    """Take the named resource. Strict (the default): if it cannot be had, raise ResourceUnavailable
    (reason in_use, quarantined, done or missing; only in_use may pass) and never hand out another
    one. Not strict: fall back to claim_next on the same pool. `reserve` as for claim_next."""
    params = _claim_params(holder=holder, lease_seconds=lease_seconds, actor=actor, details=details,
                           reserve=reserve)
    fallback = {"holder": holder, "lease_seconds": lease_seconds, "actor": actor, "details": details,
                "reserve": reserve}
    try:
        resource = get_resource(resource_id=resource_id, pool=pool, key=key)
    except ResourceNotFound as missing:
        if strict or pool is None:
            raise ResourceUnavailable(str(missing), reason="missing", resource_id=resource_id) from None
        return claim_next(pool=pool, **fallback)
    params["resource_id"] = resource.pk
    # The failed claim is explained by a second read, and the holder may have released in between:
    # a resource that reads as claimable is claimed once more rather than reported "available".
    for _ in range(2):
        claimed = _one(sql.CLAIM_BY_ID, params)
        if claimed is not None:
            return claimed
        try:
            current = get_resource(resource_id=resource.pk)
        except ResourceNotFound as missing:
            current = None
            if strict:
                raise ResourceUnavailable(str(missing), reason="missing", resource_id=resource.pk) from None
        if current is None or current.state not in CLAIMABLE:
            break
    if strict:
        raise describe_unavailability(current)
    return claim_next(pool=resource.pool_id, **fallback)


def release(*, resource: Resource | int, lease_token: uuid.UUID | str, outcome: str,
            error: BaseException | str | None = None, classification: Classification | None = None,
            actor: str | None = None, details: dict | None = None, probation_seconds: int | None = None) -> Resource:
    """Give back a claimed resource with the outcome of its use, updating its statistics.

    A failure is classified (unless the caller already did, with its own patterns): retryable
    leaves the resource failed, where a retry may pick it again; non-retryable quarantines it.
    Only the current lease token releases; a late or foreign one raises LeaseMismatch.
    `probation_seconds` puts a quarantine on probation: one probe after that cooldown."""
    resource_id = _resource_id(resource)
    token = _token(lease_token, resource_id)
    params = {"resource_id": resource_id, "token": token, "actor": actor or "",
              "details": _details(details)}
    if outcome == Outcome.SUCCESS:
        released = _one(sql.RELEASE_SUCCESS, params)
    else:
        if classification is None:
            if error is None:
                raise BadInput(gettext("a failure needs the error that caused it"), field="error")
            classification = classify(error)
        if probation_seconds:
            _whole(probation_seconds, field="probation_seconds", maximum=MAX_PROBATION_SECONDS)
        reason = _error_reason(error if error is not None else classification.text)
        new_state = ResourceState.FAILED if classification.retryable else ResourceState.QUARANTINED
        released = _one(
            sql.RELEASE_FAILURE,
            {**params, "new_state": new_state, "reason": reason, "category": classification.category,
             "cooldown": probation_seconds if new_state == ResourceState.QUARANTINED and probation_seconds else None},
        )
    if released is None:
        raise describe_lease_mismatch(resource_id, token)
    return released


def _held(resource: Resource | int, lease_token: uuid.UUID | str) -> Resource:
    """The locked row, if `lease_token` holds it; else the LeaseMismatch saying why not."""
    resource_id = _resource_id(resource)
    token = _token(lease_token, resource_id)
    current = lock_resource(resource_id)
    if current.state != ResourceState.IN_USE or current.lease_token != token:
        raise describe_lease_mismatch(resource_id, token)
    return current


def extend_lease(*, resource: Resource | int, lease_token: uuid.UUID | str, seconds: int | None = None,
                 use: bool = False) -> Resource:
    """Heartbeat: push the lease's end `seconds` (default: the pool's lease length) from now.
    With `use`, the lease (a reservation, a hold, a probe's) is now in use by its attempt, so a
    sweep of it counts as a failure."""
    seconds = _lease_seconds(seconds, field="seconds")
    with transaction.atomic():
        current = _held(resource, lease_token)
        # On PostgreSQL's clock, as the claim and the sweep: a worker's clock never moves a lease.
        current.leased_until = Now() + timezone.timedelta(seconds=seconds or current.pool.lease_seconds)
        current.lapse_seen_at = None
        fields = ["leased_until", "lapse_seen_at"]
        if use and current.lease_kind != LeaseKind.USE:
            # A reservation, a hold or a probe lease becomes an attempt's: a new holder of the
            # resource as far as side effects go, so it gets a fencing token of its own.
            current.lease_kind, current.fencing_token = LeaseKind.USE, current.fencing_token + 1
            fields += ["lease_kind", "fencing_token"]
        current.save(update_fields=fields)
        current.refresh_from_db(fields=["leased_until"])
    return current


# An external system's lease calls (the API). A claim's and a release's record is its timeline
# row, written by the one statement that changes the resource: it names who (the actor,
# "api:<client>"), when (the statement's time), with which key (its prefix) and in which request,
# so no audit entry repeats it (two more inserts and a transaction per call). A heartbeat writes no
# timeline row, and stays audited.

# The key of a claim's or a release's details under which the API's own facts are kept.
API_REQUEST_DETAILS = "api_request"


def _with_api_request(details: dict | None, *, key_prefix: str, **facts) -> dict | None:
    """The caller's details with the API's facts added under API_REQUEST_DETAILS."""
    if details is not None and not isinstance(details, dict):
        return details  # refused by _details, naming the field
    if API_REQUEST_DETAILS in (details or {}):
        raise BadInput(gettext("%(field)s.%(key)s is written by the service (which key, which request): "
                               "name yours otherwise") % {"field": "details", "key": API_REQUEST_DETAILS},
                       field="details")
    recorded = {"key_prefix": key_prefix, "request_id": audit_context.current().request_id, **facts}
    return {**(details or {}), API_REQUEST_DETAILS: recorded}


def client_claim_next(*, pool: ResourcePool | int | str, holder: str, actor: str, key_prefix: str = "",
                      lease_seconds: int | None = None, details: dict | None = None) -> Resource:
    """An external system's claim_next, recorded by its timeline row with the key's prefix and the
    request id (API_REQUEST_DETAILS)."""
    return claim_next(pool=pool, holder=holder, lease_seconds=lease_seconds, actor=actor,
                      details=_with_api_request(details, key_prefix=key_prefix))


def client_claim_by_id(*, resource_id: int, holder: str, actor: str, key_prefix: str = "", strict: bool = True,
                       lease_seconds: int | None = None, details: dict | None = None) -> Resource:
    """An external system's claim_by_id, recorded as client_claim_next's; one that is not strict
    also says which resource it asked for (it may have been given another)."""
    asked = {} if strict else {"asked_for": resource_id}
    return claim_by_id(holder=holder, resource_id=resource_id, strict=strict, lease_seconds=lease_seconds,
                       actor=actor, details=_with_api_request(details, key_prefix=key_prefix, **asked))


def client_release(*, resource: Resource | int, lease_token: uuid.UUID | str, outcome: str, actor: str,
                   key_prefix: str = "", error: str | None = None, details: dict | None = None) -> Resource:
    """An external system's release, recorded by its timeline row (the outcome is its kind, a
    failure's error its reason) as client_claim_next's."""
    return release(resource=resource, lease_token=lease_token, outcome=outcome, error=error, actor=actor,
                   details=_with_api_request(details, key_prefix=key_prefix))


def client_heartbeat(*, resource: Resource | int, lease_token: uuid.UUID | str, actor: str,
                     seconds: int | None = None) -> Resource:
    """An external system's extend_lease, audited as RESOURCE_HEARTBEAT by `actor`."""
    with transaction.atomic():
        before = _lease_shown(_held(resource, lease_token))
        return _audited(AuditAction.RESOURCE_HEARTBEAT, extend_lease(resource=resource, lease_token=lease_token,
                                                                     seconds=seconds), before=before, actor=actor)


def check_lease(*, resource: Resource | int, lease_token: uuid.UUID | str) -> None:
    """Raise LeaseMismatch unless `lease_token` still holds the resource and its lease has not run
    out by PostgreSQL's clock: what a flow asks just before each side effect, so a holder that was
    paused past its lease learns it before it acts, not after."""
    resource_id = _resource_id(resource)
    token = _token(lease_token, resource_id)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT leased_until > now() FROM {sql.RESOURCE_TABLE} "
                       f"WHERE id = %s AND state = {sql.IN_USE} AND lease_token = %s", [resource_id, token])
        row = cursor.fetchone()
    if row is None:
        raise describe_lease_mismatch(resource_id, token)
    if not row[0]:
        raise LeaseMismatch(gettext("the lease on resource %(id)s has run out; it may be handed on at any moment")
                            % {"id": resource_id}, why="expired", resource_id=resource_id, lease_token=str(token))


def hold_after_failure(*, resource: Resource | int, lease_token: uuid.UUID | str, error: BaseException | str,
                       classification: Classification, hold_until: datetime, actor: str = "") -> Resource:
    """Record a retryable failure but keep the lease until `hold_until`, so the same task's retry
    finds the resource waiting for it and neither claim_next nor a scheduler takes it meanwhile.
    The lease becomes a hold: if it runs out, the sweeper counts no second failure."""
    reason = _error_reason(error)
    with transaction.atomic():
        current = _held(resource, lease_token)
        if not classification.retryable:
            raise IllegalTransition(gettext("a non-retryable failure cannot hold its resource for a retry"),
                                    state=current.state, action="hold", resource_id=current.pk)
        now = db_now()
        current.failure_count += 1
        current.consecutive_failures += 1
        current.last_failure_reason, current.last_failure_category, current.last_failure_at = (
            reason, classification.category, now)
        current.leased_until, current.lease_kind, current.lapse_seen_at = max(hold_until, now), LeaseKind.HOLD, None
        current.save(update_fields=["failure_count", "consecutive_failures", "last_failure_reason",
                                    "last_failure_category", "last_failure_at", "leased_until", "lease_kind",
                                    "lapse_seen_at"])
        _event(current, EventKind.HELD_FOR_RETRY, actor=actor, reason=reason, category=classification.category,
               lease_token=current.lease_token, details={"held_until": current.leased_until.isoformat()})
    return current


def _unused_state(resource: Resource, now: datetime) -> None:
    """Where a resource whose lease was never used goes back to: its quarantine if the lease was a
    probe's (the next probe after the cooldown), failed if its last use failed, else available."""
    if resource.quarantined_at is not None:
        cooldown = timezone.timedelta(seconds=max(resource.probation_cooldown_seconds, 1))
        resource.state, resource.probe_after = ResourceState.QUARANTINED, now + cooldown
    else:
        resource.state = ResourceState.FAILED if resource.consecutive_failures else ResourceState.AVAILABLE
    resource.lease_token, resource.lease_holder, resource.leased_at, resource.leased_until = None, "", None, None
    resource.lease_kind, resource.lapse_seen_at = "", None


_LEASE_FIELDS = ["state", "lease_token", "lease_holder", "leased_at", "leased_until", "lease_kind", "lapse_seen_at"]


def release_unused(*, resource: Resource | int, lease_token: uuid.UUID | str, actor: str, reason: str) -> Resource:
    """Give back a lease that was never used (its task ended before running on it): no success
    or failure is counted; the resource returns as failed if its last use failed, else available.
    A probe's lease returns the resource to its quarantine."""
    with transaction.atomic():
        current = _held(resource, lease_token)
        token = current.lease_token
        _unused_state(current, timezone.now())
        current.save(update_fields=[*_LEASE_FIELDS, "probe_after", "fencing_token"])
        _event(current, EventKind.RELEASED_UNUSED, actor=actor, reason=reason, lease_token=token)
    return current


MAX_PROBATION_SECONDS = 7 * 24 * 3600


def claim_for_probe(*, resource: Resource | int, holder: str, now: datetime | None = None,
                    lease_seconds: int | None = None) -> Resource:
    """Lease a quarantined resource whose probation cooldown is over, for its one probe. The lease
    is a probe lease until its attempt starts (extend_lease(use=True))."""
    lease_seconds = _lease_seconds(lease_seconds)
    with transaction.atomic():
        current = lock_resource(resource)
        now = now or db_now()
        if current.state != ResourceState.QUARANTINED or current.probe_after is None or current.probe_after > now:
            words = {"noun": current.pool.resource_noun, "key": current.key,
                     "state": current.get_state_display().lower(), "after": when(current.probe_after)}
            raise IllegalTransition(
                (gettext("%(noun)s %(key)s is not due for a probe: it is %(state)s, probe after %(after)s")
                 if current.probe_after else gettext("%(noun)s %(key)s is not due for a probe: it is %(state)s"))
                % words, state=current.state, action="probe", resource_id=current.pk,
            )
        current.state, current.probe_after, current.lease_kind = ResourceState.IN_USE, None, LeaseKind.PROBE
        current.lease_token, current.lease_holder = uuid.uuid4(), holder
        current.fencing_token += 1  # under the row's lock
        current.leased_at = now
        current.leased_until = now + timezone.timedelta(seconds=lease_seconds or current.pool.lease_seconds)
        current.save(update_fields=[*_LEASE_FIELDS, "probe_after", "fencing_token"])
        _event(current, EventKind.PROBE_CLAIMED, actor=holder, reason=current.quarantine_reason,
               lease_token=current.lease_token)
    return current


def postpone_probe(*, resource: Resource | int, actor: str, reason: str, now: datetime | None = None) -> Resource:
    """A probe that could not be started (no task to repeat, its flow or policy gone): the next
    one waits another cooldown, so the quarantined resources due after this one are probed
    meanwhile instead of queueing behind it. Nothing changes if the resource is no longer due
    (probed, released or postponed since)."""
    with transaction.atomic():
        current = lock_resource(resource)
        now = now or db_now()
        if current.state != ResourceState.QUARANTINED or current.probe_after is None or current.probe_after > now:
            return current
        cooldown = max(current.probation_cooldown_seconds, 1)
        current.probe_after = now + timezone.timedelta(seconds=cooldown)
        current.save(update_fields=["probe_after"])
        _event(current, EventKind.QUARANTINED, actor=actor, reason=f"{reason}; next probe after {cooldown} s")
    return current


def end_probe(*, resource: Resource | int, lease_token: uuid.UUID | str, succeeded: bool,
              error: BaseException | str | None = None, actor: str = "") -> Resource:
    """A probe's outcome: success ends the quarantine (the resource goes back to the pool, or is
    done in a pool that consumes its resources); failure quarantines it again with twice the
    cooldown (at most a week). A lease taken on a resource that was no longer quarantined (a stale
    probe, after an operator released the quarantine) is released as any use of that outcome."""
    now = timezone.now()
    with transaction.atomic():
        current = _held(resource, lease_token)
        if current.quarantined_at is None:
            return release(resource=current.pk, lease_token=current.lease_token, actor=actor or None,
                           outcome=Outcome.SUCCESS if succeeded else Outcome.FAILURE,
                           error=None if succeeded else (error if error is not None else "probe failed"),
                           details={"probe": True})
        token, reason = current.lease_token, current.quarantine_reason
        current.lease_token, current.lease_holder, current.leased_at, current.leased_until = None, "", None, None
        current.lease_kind, current.lapse_seen_at = "", None
        if succeeded:
            current.state = ResourceState.DONE if current.pool.consume_on_success else ResourceState.AVAILABLE
            current.quarantine_reason, current.quarantined_at = "", None
            current.success_count += 1
            current.consecutive_failures, current.last_success_at = 0, now
            current.probation_cooldown_seconds = 0
            kinds = [(EventKind.RELEASED_SUCCESS, ""), (EventKind.UNQUARANTINED, "probe succeeded")]
        else:
            text = _error_reason(error if error is not None else "probe failed")
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
            *_LEASE_FIELDS, "quarantine_reason", "quarantined_at",
            "success_count", "failure_count", "consecutive_failures", "last_success_at", "last_failure_reason",
            "last_failure_category", "last_failure_at", "probation_cooldown_seconds", "probe_after"])
        for kind, why in kinds:
            _event(current, kind, actor=actor, reason=why, lease_token=token,
                   details={"probe": True, "quarantine_reason": reason})
    return current


def lock_resource(resource: Resource | int) -> Resource:
    """The resource's row, read again under its lock (FOR UPDATE of the resource alone), with its
    pool; ResourceNotFound when there is none. Inside the caller's transaction: every service that
    locks a resource by id (here and in scheduling) takes it through this one, so they take the
    same lock the same way."""
    resource_id = _resource_id(resource)
    current = Resource.objects.select_for_update(of=("self",)).select_related("pool").filter(pk=resource_id).first()
    if current is None:
        raise no_such_resource(resource_id)
    return current


# The verbs of _locked_in's refusals, as an operator reads them.
_ACTION_VERBS = {
    "reset": pgettext_lazy("refused action", "reset"),
    "quarantine": pgettext_lazy("refused action", "quarantine"),
    "unquarantine": pgettext_lazy("refused action", "unquarantine"),
}
_STATE_NAMES = {
    ResourceState.AVAILABLE: pgettext_lazy("state name", "available"),
    ResourceState.IN_USE: pgettext_lazy("state name", "in use"),
    ResourceState.DONE: pgettext_lazy("state name", "done"),
    ResourceState.FAILED: pgettext_lazy("state name", "failed"),
    ResourceState.QUARANTINED: pgettext_lazy("state name", "quarantined"),
}


def _locked_in(resource: Resource | int, action: str, allowed: tuple[str, ...]) -> Resource:
    """The locked row, if its state allows `action`; else IllegalTransition naming both."""
    current = lock_resource(resource)
    if current.state not in allowed:
        raise IllegalTransition(
            gettext("cannot %(action)s %(noun)s %(key)s: it is %(state)s; only %(allowed)s ones can be") % {
                "action": _ACTION_VERBS.get(action, action), "noun": current.pool.resource_noun, "key": current.key,
                "state": current.get_state_display().lower(),
                "allowed": listing([str(_STATE_NAMES[s]) for s in allowed], last_joined_by="or")},
            state=current.state, action=action, resource_id=current.pk,
        )
    return current


def _event(resource: Resource, kind: str, *, actor: str, reason: str = "", category: str = "",
           lease_token: uuid.UUID | None = None, details: dict | None = None) -> None:
    ResourceEvent.objects.create(resource=resource, kind=kind, actor=actor, reason=reason, category=category,
                                 lease_token=lease_token, details=details or {})


def reset(*, resource: Resource | int, actor: str, reason: str = "") -> Resource:
    """An operator's reset: make a failed or consumed resource available again, audited as
    RESOURCE_RESET. Counters, reasons and history stay."""
    with transaction.atomic():
        current, previous = _reset(resource, actor=actor, reason=reason)
        record_audit(action=AuditAction.RESOURCE_RESET, target=current, before={"state": previous},
                     after={"state": current.state}, reason=reason, actor=actor)
    return current


def reset_for_retry(*, resource: Resource | int, actor: str) -> Resource:
    """The reset inside an operator's retry of the resource: no audit entry of its own (the retry
    records one RESOURCE_RETRY, not a reset besides it)."""
    with transaction.atomic():
        return _reset(resource, actor=actor, reason="retry this resource")[0]


def _reset(resource: Resource | int, *, actor: str, reason: str) -> tuple[Resource, str]:
    current = _locked_in(resource, "reset", (ResourceState.FAILED, ResourceState.DONE))
    previous = current.state
    current.state = ResourceState.AVAILABLE
    current.save(update_fields=["state"])
    _event(current, EventKind.RESET, actor=actor, reason=reason, details={"from": previous})
    return current, previous


def quarantine(*, resource: Resource | int, actor: str, reason: str) -> Resource:
    """Take a resource out of rotation until someone releases it from quarantine."""
    allowed = (ResourceState.AVAILABLE, ResourceState.FAILED, ResourceState.DONE)
    with transaction.atomic():
        current = _locked_in(resource, "quarantine", allowed)
        before = {"state": current.state, "quarantine_reason": current.quarantine_reason,
                  "quarantined_at": current.quarantined_at}
        current.state = ResourceState.QUARANTINED
        current.quarantine_reason = reason
        current.quarantined_at = timezone.now()
        current.save(update_fields=["state", "quarantine_reason", "quarantined_at"])
        _event(current, EventKind.QUARANTINED, actor=actor, reason=current.quarantine_reason)
        record_audit(action=AuditAction.RESOURCE_QUARANTINE, target=current, before=before,
                     after={"state": current.state, "quarantine_reason": reason,
                            "quarantined_at": current.quarantined_at},
                     reason=reason, actor=actor)
    return current


def unquarantine(*, resource: Resource | int, actor: str, reason: str = "") -> Resource:
    """Put a quarantined resource back in the pool; the quarantine stays in its timeline."""
    allowed = (ResourceState.QUARANTINED,)
    with transaction.atomic():
        current = _locked_in(resource, "unquarantine", allowed)
        previous = current.quarantine_reason
        before = {"state": current.state, "quarantine_reason": previous, "quarantined_at": current.quarantined_at,
                  "probe_after": current.probe_after,
                  "probation_cooldown_seconds": current.probation_cooldown_seconds}
        current.state = ResourceState.AVAILABLE
        current.quarantine_reason = ""
        current.quarantined_at = current.probe_after = None
        current.probation_cooldown_seconds = 0
        current.save(update_fields=["state", "quarantine_reason", "quarantined_at", "probe_after",
                                    "probation_cooldown_seconds"])
        _event(current, EventKind.UNQUARANTINED, actor=actor, reason=reason, details={"quarantine_reason": previous})
        record_audit(action=AuditAction.RESOURCE_UNQUARANTINE, target=current, before=before,
                     after={"state": current.state, "quarantine_reason": "", "quarantined_at": None,
                            "probe_after": None, "probation_cooldown_seconds": 0},
                     reason=reason, actor=actor)
    return current


def sweep_expired_leases(*, now: datetime | None = None, actor: str = "lease sweeper",
                         limit: int = 1000) -> list[ExpiredLease]:
    """Take back resources whose lease ran out. A used lease (its holder died or hung) becomes a
    failure: failed, retryable, "lease expired", counted. An unused one (a reservation, a hold, a
    probe lease whose attempt never started) goes back as release_unused leaves it, counting
    nothing. Each gets a lease_expired event saying which it was. A lease is taken a heartbeat
    interval after a sweep first saw it lapsed (sql.SWEEP), on PostgreSQL's clock; `now` is for
    tests, standing in for a later time."""
    params = {"now": now, "limit": _whole(limit, field="limit"), "actor": actor,
              "reason": LEASE_EXPIRED_REASON, "unused_reason": LEASE_EXPIRED_UNUSED_REASON}
    with connection.cursor() as cursor:
        cursor.execute(sql.SWEEP, params)
        rows = cursor.fetchall()
    return [ExpiredLease(resource_id=r[0], lease_token=r[1], holder=r[2], leased_until=r[3], lease_kind=r[4],
                         used=r[5]) for r in rows]


def _unique_violation(exc: IntegrityError) -> str | None:
    """The unique constraint an IntegrityError broke, if that is what it was."""
    diag = getattr(exc.__cause__, "diag", None)
    return getattr(diag, "constraint_name", None) if getattr(exc.__cause__, "sqlstate", None) == "23505" else None


def _pool_fields(*, lease_seconds=None, **fields) -> dict:
    """The given pool fields, the lease's length checked; None leaves a field out."""
    fields["lease_seconds"] = _lease_seconds(lease_seconds)
    return {field: value for field, value in fields.items() if value is not None}


def _name_taken(name: str) -> BadInput:
    return BadInput(gettext("a resource pool named %(name)s exists already") % {"name": repr(name)}, field="name",
                    code="name_taken")


def create_pool(*, name: str, resource_noun: str = "resource", lease_seconds: int = 300,
                consume_on_success: bool = False, description: str = "", actor: str | None = None) -> ResourcePool:
    """A new, empty pool; a taken name (also by a create running at the same time) is bad input naming it.
    `actor` names who creates it in the audit log (default: the audit context's actor)."""
    fields = _pool_fields(name=name, resource_noun=resource_noun, lease_seconds=lease_seconds,
                          consume_on_success=consume_on_success, description=description)
    try:
        with transaction.atomic():
            created = ResourcePool.objects.create(**fields)
            record_audit(action=AuditAction.POOL_CREATE, target=created, before=None, after=fields,
                         actor=actor or None)
            return created
    except IntegrityError as exc:
        if _unique_violation(exc) is None:
            raise
        raise _name_taken(fields["name"]) from None


def _write_changes(row, changes: dict, *, action: str, actor: str) -> None:
    """Write the fields of `changes` that differ from the (locked) row, and their audit entry with
    the before and after of just those; nothing at all when none differs."""
    edited = {field: value for field, value in changes.items() if getattr(row, field) != value}
    if not edited:
        return
    before = {field: getattr(row, field) for field in edited}
    for field, value in edited.items():
        setattr(row, field, value)
    row.save(update_fields=list(edited))
    record_audit(action=action, target=row, before=before, after=edited, actor=actor)


def _merge_patch(target, patch):
    """`patch` applied to `target` as a JSON merge patch (RFC 7396): its keys set, a key set to None
    removed, an object merged into the object it names the same way; the other keys kept."""
    if not isinstance(patch, dict):
        return patch
    merged = dict(target) if isinstance(target, dict) else {}
    for name, value in patch.items():
        if value is None:
            merged.pop(name, None)
        else:
            merged[name] = _merge_patch(merged.get(name), value)
    return merged


def change_resource(*, resource: Resource | int, actor: str, label: str | None = None,
                    attributes: dict | None = None, merge_attributes: bool = False,
                    if_match: Collection[str] | None = None) -> Resource:
    """Edit what an operator may edit of a resource: its label and attributes (None: leave it).
    `attributes` is the whole new object (the console's form), or with `merge_attributes` a merge
    patch of it (the API's PATCH): the keys to set, a key set to None removed, the others kept.
    With `if_match`, the versions its sender read (the API's If-Match), a resource at none of them
    is left unchanged: ResourceChanged. Under the row's lock and with update_fields, so a claim or
    release landing meanwhile keeps its state and lease; state and statistics change only through
    the other services. The resource is returned with its `version` after the change."""
    changes = {} if label is None else {"label": label}
    with transaction.atomic():
        current = lock_resource(resource)
        if if_match is not None:
            # Compared under the lock: nothing can write the row between this read and the write.
            version = resource_version(current.pk)
            if version not in if_match:
                raise ResourceChanged(
                    gettext("%(noun)s %(key)s has changed since you read it: read it again, make your change to "
                            "what it is now, and send that with its new ETag") % {
                        "noun": current.pool.resource_noun, "key": current.key},
                    resource_id=current.pk, version=version)
        if attributes is not None:
            if merge_attributes:
                attributes = _merge_patch(current.attributes, attributes)
            # What the console and the API showed was masked: a secret sent back as its mask
            # keeps the stored value, one typed over the mask replaces it, a mask with no stored
            # secret behind it is refused.
            changes["attributes"] = keep_masked_secrets(attributes, current.attributes, field="attributes",
                                                        error=BadInput)
        _write_changes(current, changes, action=AuditAction.RESOURCE_CHANGE, actor=actor)
        current.version = resource_version(current.pk)
    return current


def change_pool(*, pool: ResourcePool | int | str, actor: str, name: str | None = None,
                resource_noun: str | None = None, lease_seconds: int | None = None,
                consume_on_success: bool | None = None, description: str | None = None) -> ResourcePool:
    """Edit a pool's settings (None: leave it), writing only what changed, under the row's lock."""
    changes = _pool_fields(name=name, resource_noun=resource_noun, lease_seconds=lease_seconds,
                           consume_on_success=consume_on_success, description=description)
    pool_id = get_pool(pool).pk
    try:
        with transaction.atomic():
            current = ResourcePool.objects.select_for_update().get(pk=pool_id)
            _write_changes(current, changes, action=AuditAction.POOL_CHANGE, actor=actor)
    except IntegrityError as exc:
        if _unique_violation(exc) is None:
            raise
        raise _name_taken(changes["name"]) from None
    return current


def _keys_taken(target: ResourcePool, keys: list[str], repeated: list[str]) -> BadInput | None:
    taken = sorted(Resource.objects.filter(pool=target, key__in=keys).values_list("key", flat=True))
    problems = ([gettext("pool %(pool)s already has %(keys)s") % {"pool": target.name, "keys": ", ".join(taken)}]
                if taken else []) + (
        [gettext("keys given twice: %(keys)s") % {"keys": ", ".join(repeated)}] if repeated else [])
    if not problems:
        return None
    # A key given twice is the request's fault; one the pool has already, the state's.
    return BadInput(pgettext("joins sentences", "; ").join(problems), field="key", taken=taken, repeated=repeated,
                    code="bad_input" if repeated else "key_taken")


def add_resources(*, pool: ResourcePool | int | str, resources: list[dict],
                  actor: str | None = None) -> list[Resource]:
    """Add resources ({"key", "label", "attributes"}) to a pool, all or none; duplicate keys are
    named, also those another add running at the same time took first. One audit entry for the
    whole add, on the pool, with the keys (`actor`: default, the audit context's actor)."""
    target = get_pool(pool)
    rows = [{"key": item["key"], "label": item.get("label", ""), "attributes": item.get("attributes") or {}}
            for item in resources]
    if not rows:
        return []
    keys = [row["key"] for row in rows]
    repeated = sorted({key for key in keys if keys.count(key) > 1})
    problem = _keys_taken(target, keys, repeated)
    if problem is not None:
        raise problem
    try:
        with transaction.atomic():
            created = Resource.objects.bulk_create(Resource(pool=target, **row) for row in rows)
            # One operator action, one entry: adding 50 resources at once is one add, and the pool
            # is what changed (its membership). A resource's own history starts at its first event.
            record_audit(action=AuditAction.RESOURCE_CREATE, target=target, before=None,
                         after={"count": len(created), "keys": keys}, actor=actor or None)
            return created
    except IntegrityError as exc:
        if _unique_violation(exc) != "resource_key_unique_in_pool":
            raise
        # Another add committed one of these keys while this one waited for it.
        raise _keys_taken(target, keys, []) or BadInput(
            gettext("a key of these was added to pool %(pool)s meanwhile") % {"pool": target.name},
            field="key", code="key_taken") from None
