"""The pool's hot statements: each a data-modifying CTE that checks the state, changes the row and
appends its timeline event in one round trip (see resources.services). States, lease kinds and
event kinds come from resources.choices; the timeline INSERT is written once, in `_append_events`."""

from resources.choices import EventKind, FailureCategory, LeaseKind, ResourceState
from resources.models import Resource, ResourceEvent, ResourcePool

_R = RESOURCE_TABLE = Resource._meta.db_table
_P = ResourcePool._meta.db_table
_E = ResourceEvent._meta.db_table

# The row's columns in the model's field order, so rows become Resource objects without raw().
COLUMNS = [f.column for f in Resource._meta.concrete_fields]

_RETURNING = ", ".join(f"r.{column}" for column in COLUMNS)


def _q(value: str) -> str:
    """A choice value as an SQL literal (choices are plain identifiers, never user input)."""
    if not value.replace("_", "").isalnum():
        raise AssertionError(f"not a choice value: {value!r}")
    return f"'{value}'"


AVAILABLE, IN_USE, DONE = _q(ResourceState.AVAILABLE), _q(ResourceState.IN_USE), _q(ResourceState.DONE)
FAILED, QUARANTINED = _q(ResourceState.FAILED), _q(ResourceState.QUARANTINED)
USE = _q(LeaseKind.USE)
RETRYABLE = _q(FailureCategory.RETRYABLE)

_NO_LEASE = ("lease_token = NULL, lease_holder = '', leased_at = NULL, leased_until = NULL, lease_kind = '', "
             "lapse_seen_at = NULL")


def _append_events(source: str, *, kind: str, reason: str = "''", category: str = "''",
                   token: str = "%(token)s::uuid", details: str = "%(details)s::jsonb", extra: str = "") -> str:
    """The CTE that appends one timeline row per row of `source` (a CTE returning `id`); `kind`,
    `reason`, `category`, `token` and `details` are SQL expressions, `extra` more FROM items and
    a WHERE/ORDER BY. Timed as every event is (ResourceEvent.created_at): by the statement, not the
    transaction, so an event a transaction appends after another reads as later."""
    return f"""event AS (
        INSERT INTO {_E} (resource_id, kind, actor, reason, category, lease_token, details, created_at)
        SELECT {source}.id, {kind}, %(actor)s::text, {reason}, {category}, {token}, {details}, statement_timestamp()
        FROM {source}{extra}
    )"""


_LEASE_COLUMNS = f"""
    state = {IN_USE}, lease_token = %(token)s::uuid, lease_holder = %(holder)s::text, leased_at = now(),
    leased_until = now() + make_interval(secs => coalesce(%(lease_seconds)s::integer, p.lease_seconds)),
    lease_kind = %(lease_kind)s::text, fencing_token = r.fencing_token + 1, lapse_seen_at = NULL
"""



def _with_pool_name(source: str) -> str:
    """The final SELECT of a hot statement: the changed row's columns (COLUMNS), then its pool's
    name, which every answer of the API shows (an index probe here, a query of its own after)."""
    return f"SELECT {source}.*, (SELECT p.name FROM {_P} p WHERE p.id = {source}.pool_id) FROM {source}"


_CLAIMED_EVENT = _append_events("claimed", kind=_q(EventKind.CLAIMED))
_CLAIM_EVENT = f"""
    , {_CLAIMED_EVENT}
    {_with_pool_name("claimed")}
"""

# A pool is named by its id, or (the id null) by its name, looked up in the statement itself: the
# API's claim_next then reads nothing before its claim.
_POOL = f"coalesce(%(pool_id)s::bigint, (SELECT id FROM {_P} WHERE name = %(pool_name)s::text))"

# The lowest and highest available id of a pool: two probes of resource_available_idx (pool_id, id),
# whatever the size of the pool or of the pools whose ids lie around it.
AVAILABLE_BOUNDS = f"""
    SELECT min(id), max(id) FROM {_R} WHERE pool_id = {_POOL} AND state = {AVAILABLE}
"""

# Start the scan at a random id of the pool, so concurrent claimers spread over the pool instead
# of queueing on its first rows. Scanning forward from there (and once from the start when
# nothing lies past it) costs the same whatever the pool's size.
def claim_next_ctes(*, pool_id: str = _POOL, start_id: str | None = "%(start_id)s::bigint") -> str:
    """CLAIM_NEXT's CTEs (`pick`, `claimed` with the resource's columns, and its timeline `event`),
    for a statement of a higher layer that claims as part of its own change; `pool_id` and
    `start_id` are SQL expressions, and start_id None starts at a random available id of the pool
    (AVAILABLE_BOUNDS's probes, in the statement). Its parameters are CLAIM_NEXT's."""
    if start_id is None:
        start_id = (f"(SELECT coalesce(min(id) + floor(random() * (max(id) - min(id) + 1))::bigint, 0) FROM {_R}"
                    f" WHERE pool_id = {pool_id} AND state = {AVAILABLE})")
    return f"""pick AS (
        SELECT r.id FROM {_R} r
        WHERE r.pool_id = {pool_id} AND r.state = {AVAILABLE} AND r.id >= {start_id}
        ORDER BY r.pool_id, r.id
        LIMIT 1
        FOR UPDATE SKIP LOCKED
    ), claimed AS (
        UPDATE {_R} r SET {_LEASE_COLUMNS}
        FROM pick, {_P} p
        WHERE r.id = pick.id AND p.id = r.pool_id
        RETURNING {_RETURNING}
    ), {_CLAIMED_EVENT}"""


CLAIM_NEXT = f"""
    WITH {claim_next_ctes()}
    {_with_pool_name("claimed")}
"""

# A named resource: waits for a concurrent claimer's row lock, then re-checks the state, so
# two strict claims of the same resource never both succeed. A failed resource may be claimed
# by name: that is how an operator retries it.
CLAIM_BY_ID = f"""
    WITH claimed AS (
        UPDATE {_R} r SET {_LEASE_COLUMNS}
        FROM {_P} p
        WHERE r.id = %(resource_id)s::bigint AND p.id = r.pool_id AND r.state IN ({AVAILABLE}, {FAILED})
        RETURNING {_RETURNING}
    )
    {_CLAIM_EVENT}
"""

_HELD = f"r.id = %(resource_id)s::bigint AND r.state = {IN_USE} AND r.lease_token = %(token)s::uuid"


def release_success_ctes(*, only_if: str = "TRUE") -> str:
    """RELEASE_SUCCESS's CTEs (`released`, with the resource's columns, and its timeline `event`),
    for a statement of a higher layer that releases as part of its own change, when the SQL
    condition `only_if` holds. Its parameters are RELEASE_SUCCESS's."""
    return f"""released AS (
        UPDATE {_R} r SET
            state = CASE WHEN p.consume_on_success THEN {DONE} ELSE {AVAILABLE} END, {_NO_LEASE},
            success_count = r.success_count + 1, consecutive_failures = 0, last_success_at = now()
        FROM {_P} p
        WHERE {_HELD} AND p.id = r.pool_id AND {only_if}
        RETURNING {_RETURNING}
    ), {_append_events("released", kind=_q(EventKind.RELEASED_SUCCESS))}"""


RELEASE_SUCCESS = f"""
    WITH {release_success_ctes()}
    {_with_pool_name("released")}
"""

# The failure, and the quarantine when it led to one, in that order.
_RELEASE_FAILURE_EVENTS = _append_events(
    "released", kind="k.kind", reason="%(reason)s::text", category="%(category)s::text",
    extra=f""", (VALUES (1, {_q(EventKind.RELEASED_FAILURE)}), (2, {_q(EventKind.QUARANTINED)})) AS k(n, kind)
        WHERE k.n = 1 OR released.state = {QUARANTINED}
        ORDER BY k.n""")

RELEASE_FAILURE = f"""
    WITH released AS (
        UPDATE {_R} r SET
            state = %(new_state)s::text, {_NO_LEASE},
            failure_count = r.failure_count + 1, consecutive_failures = r.consecutive_failures + 1,
            last_failure_reason = %(reason)s::text, last_failure_category = %(category)s::text, last_failure_at = now(),
            quarantine_reason = CASE WHEN %(new_state)s::text = {QUARANTINED} THEN %(reason)s::text ELSE r.quarantine_reason END,
            quarantined_at = CASE WHEN %(new_state)s::text = {QUARANTINED} THEN now() ELSE r.quarantined_at END,
            probe_after = CASE WHEN %(cooldown)s::integer > 0 THEN now() + make_interval(secs => %(cooldown)s::integer) END,
            probation_cooldown_seconds = coalesce(%(cooldown)s::integer, 0)
        WHERE {_HELD}
        RETURNING {_RETURNING}
    ), {_RELEASE_FAILURE_EVENTS}
    {_with_pool_name("released")}
"""

# A used lease that ran out is a failure (its holder died or hung). An unused one (a reservation or
# a probe lease whose attempt never started, a hold whose failure was counted already) goes back
# as release_unused leaves it: quarantined if it was a probe's, failed if its last use failed,
# else available. A lease on a resource still marked quarantined is a probation probe's: it
# leaves the quarantine standing and schedules the next probe.
_SWEEP_EVENTS = _append_events(
    "swept", kind=_q(EventKind.LEASE_EXPIRED), token="expired_token",
    reason="CASE WHEN used THEN %(reason)s::text ELSE %(unused_reason)s::text END",
    category=f"CASE WHEN used THEN {RETRYABLE} ELSE '' END",
    details="jsonb_build_object('holder', expired_holder, 'leased_until', expired_at, "
            "'lease_kind', expired_kind, 'used', used)")

# PostgreSQL's clock decides whether a lease has lapsed, never a host's. A lease seen lapsed is
# taken a heartbeat interval (a third of its pool's lease) after the sweep first saw it, not at
# once: after a database outage every lease has lapsed, and the holders still alive get one
# heartbeat to renew. `now` is a test's stand-in for a later time; production passes none.
_SWEEP_NOW = "coalesce(%(now)s::timestamptz, now())"

SWEEP = f"""
    WITH lapsed AS (
        SELECT r.id, r.lease_token, r.lease_holder, r.leased_until, r.lease_kind, r.lease_kind = {USE} AS used,
               coalesce(r.lapse_seen_at, now()) <= {_SWEEP_NOW} - make_interval(secs => p.lease_seconds / 3.0) AS due
        FROM {_R} r JOIN {_P} p ON p.id = r.pool_id
        WHERE r.state = {IN_USE} AND r.leased_until < {_SWEEP_NOW}
        ORDER BY r.leased_until
        LIMIT %(limit)s::integer
        FOR UPDATE OF r SKIP LOCKED
    ), seen AS (
        UPDATE {_R} r SET lapse_seen_at = now() FROM lapsed
        WHERE r.id = lapsed.id AND r.lapse_seen_at IS NULL AND NOT lapsed.due
    ), expired AS (
        SELECT * FROM lapsed WHERE due
    ), swept AS (
        UPDATE {_R} r SET
            state = CASE WHEN r.quarantined_at IS NOT NULL THEN {QUARANTINED}
                         WHEN expired.used OR r.consecutive_failures > 0 THEN {FAILED}
                         ELSE {AVAILABLE} END,
            probe_after = CASE WHEN r.quarantined_at IS NULL THEN NULL
                               ELSE now() + make_interval(secs => greatest(r.probation_cooldown_seconds, 1)) END,
            {_NO_LEASE},
            failure_count = r.failure_count + expired.used::integer,
            consecutive_failures = r.consecutive_failures + expired.used::integer,
            last_failure_reason = CASE WHEN expired.used THEN %(reason)s::text ELSE r.last_failure_reason END,
            last_failure_category = CASE WHEN expired.used THEN {RETRYABLE} ELSE r.last_failure_category END,
            last_failure_at = CASE WHEN expired.used THEN now() ELSE r.last_failure_at END
        FROM expired
        WHERE r.id = expired.id
        RETURNING r.id, expired.lease_token AS expired_token, expired.lease_holder AS expired_holder,
                  expired.leased_until AS expired_at, expired.lease_kind AS expired_kind, expired.used
    ), {_SWEEP_EVENTS}
    SELECT id, expired_token, expired_holder, expired_at, expired_kind, used FROM swept
"""
