"""The pool's hot statements: each a data-modifying CTE that checks the state, changes the row and
appends its timeline event in one round trip (see resources.services)."""

from resources.models import Resource, ResourceEvent, ResourcePool

_R = RESOURCE_TABLE = Resource._meta.db_table
_P = ResourcePool._meta.db_table
_E = ResourceEvent._meta.db_table

# The row's columns in the model's field order, so rows become Resource objects without raw().
COLUMNS = [f.column for f in Resource._meta.concrete_fields]

_RETURNING = ", ".join(f"r.{column}" for column in COLUMNS)

_LEASE_COLUMNS = """
    state = 'in_use', lease_token = %(token)s::uuid, lease_holder = %(holder)s::text, leased_at = now(),
    leased_until = now() + make_interval(secs => coalesce(%(lease_seconds)s::integer, p.lease_seconds))
"""

_CLAIM_EVENT = f"""
    , event AS (
        INSERT INTO {_E} (resource_id, kind, actor, reason, category, lease_token, details, created_at)
        SELECT id, 'claimed', %(actor)s::text, '', '', %(token)s::uuid, %(details)s::jsonb, now() FROM claimed
    )
    SELECT * FROM claimed
"""

# Start the scan at a random id of the pool, so concurrent claimers spread over the pool instead
# of queueing on its first rows. Scanning forward from there (and once from the start when
# nothing lies past it) costs the same whatever the pool's size.
CLAIM_NEXT = f"""
    WITH pick AS (
        SELECT r.id FROM {_R} r
        WHERE r.pool_id = %(pool_id)s::bigint AND r.state = 'available' AND r.id >= %(start_id)s::bigint
        ORDER BY r.pool_id, r.id
        LIMIT 1
        FOR UPDATE SKIP LOCKED
    ), claimed AS (
        UPDATE {_R} r SET {_LEASE_COLUMNS}
        FROM pick, {_P} p
        WHERE r.id = pick.id AND p.id = r.pool_id
        RETURNING {_RETURNING}
    )
    {_CLAIM_EVENT}
"""

# A named resource: waits for a concurrent claimer's row lock, then re-checks the state, so
# two strict claims of the same resource never both succeed. A failed resource may be claimed
# by name: that is how an operator retries it.
CLAIM_BY_ID = f"""
    WITH claimed AS (
        UPDATE {_R} r SET {_LEASE_COLUMNS}
        FROM {_P} p
        WHERE r.id = %(resource_id)s::bigint AND p.id = r.pool_id AND r.state IN ('available', 'failed')
        RETURNING {_RETURNING}
    )
    {_CLAIM_EVENT}
"""

RELEASE_SUCCESS = f"""
    WITH released AS (
        UPDATE {_R} r SET
            state = CASE WHEN p.consume_on_success THEN 'done' ELSE 'available' END,
            lease_token = NULL, lease_holder = '', leased_at = NULL, leased_until = NULL,
            success_count = r.success_count + 1, consecutive_failures = 0, last_success_at = now()
        FROM {_P} p
        WHERE r.id = %(resource_id)s::bigint AND p.id = r.pool_id
          AND r.state = 'in_use' AND r.lease_token = %(token)s::uuid
        RETURNING {_RETURNING}
    ), event AS (
        INSERT INTO {_E} (resource_id, kind, actor, reason, category, lease_token, details, created_at)
        SELECT id, 'released_success', %(actor)s::text, '', '', %(token)s::uuid, %(details)s::jsonb, now() FROM released
    )
    SELECT * FROM released
"""

RELEASE_FAILURE = f"""
    WITH released AS (
        UPDATE {_R} r SET
            state = %(new_state)s::text,
            lease_token = NULL, lease_holder = '', leased_at = NULL, leased_until = NULL,
            failure_count = r.failure_count + 1, consecutive_failures = r.consecutive_failures + 1,
            last_failure_reason = %(reason)s::text, last_failure_category = %(category)s::text, last_failure_at = now(),
            quarantine_reason = CASE WHEN %(new_state)s::text = 'quarantined' THEN %(reason)s::text ELSE r.quarantine_reason END,
            quarantined_at = CASE WHEN %(new_state)s::text = 'quarantined' THEN now() ELSE r.quarantined_at END,
            probe_after = CASE WHEN %(cooldown)s::integer > 0 THEN now() + make_interval(secs => %(cooldown)s::integer) END,
            probation_cooldown_seconds = coalesce(%(cooldown)s::integer, 0)
        WHERE r.id = %(resource_id)s::bigint AND r.state = 'in_use' AND r.lease_token = %(token)s::uuid
        RETURNING {_RETURNING}
    ), event AS (
        INSERT INTO {_E} (resource_id, kind, actor, reason, category, lease_token, details, created_at)
        SELECT released.id, k.kind, %(actor)s::text, %(reason)s::text, %(category)s::text, %(token)s::uuid, %(details)s::jsonb, now()
        FROM released, (VALUES (1, 'released_failure'), (2, 'quarantined')) AS k(n, kind)
        WHERE k.kind = 'released_failure' OR released.state = 'quarantined'
        ORDER BY k.n
    )
    SELECT * FROM released
"""

SWEEP = f"""
    WITH expired AS (
        SELECT id, lease_token, lease_holder, leased_until FROM {_R}
        WHERE state = 'in_use' AND leased_until < %(now)s::timestamptz
        ORDER BY leased_until
        LIMIT %(limit)s::integer
        FOR UPDATE SKIP LOCKED
    ), swept AS (
        UPDATE {_R} r SET
            -- A lease on a resource still marked quarantined is a probation probe's: a lost probe
            -- leaves the quarantine standing and schedules the next probe.
            state = CASE WHEN r.quarantined_at IS NULL THEN 'failed' ELSE 'quarantined' END,
            probe_after = CASE WHEN r.quarantined_at IS NULL THEN NULL
                               ELSE now() + make_interval(secs => greatest(r.probation_cooldown_seconds, 1)) END,
            lease_token = NULL, lease_holder = '', leased_at = NULL, leased_until = NULL,
            failure_count = r.failure_count + 1, consecutive_failures = r.consecutive_failures + 1,
            last_failure_reason = %(reason)s::text, last_failure_category = 'retryable', last_failure_at = now()
        FROM expired
        WHERE r.id = expired.id
        RETURNING r.id, expired.lease_token AS expired_token, expired.lease_holder AS expired_holder,
                  expired.leased_until AS expired_at
    ), event AS (
        INSERT INTO {_E} (resource_id, kind, actor, reason, category, lease_token, details, created_at)
        SELECT id, 'lease_expired', %(actor)s::text, %(reason)s::text, 'retryable', expired_token,
               jsonb_build_object('holder', expired_holder, 'leased_until', expired_at), now()
        FROM swept
    )
    SELECT * FROM swept
"""
