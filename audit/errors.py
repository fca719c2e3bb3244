"""Errors of the audit app whose code no other app's error has: refusals of requests sent with an
Idempotency-Key. Its other refusals are retryops.errors' (BadInput, NotFound, IllegalTransition)."""

from retryops.errors import DomainError


class IdempotencyKeyReused(DomainError):
    """The Idempotency-Key was first sent with another request (method, path or body); details:
    `key`, `first_seen_at`."""

    code = "idempotency_key_reused"


class IdempotencyKeyInProgress(DomainError):
    """The first request sent with this Idempotency-Key has not been answered yet; details: `key`,
    `started_at`, `stale` (true once it has taken longer than any request may: its server stopped
    while processing it, and whether its work was done is unknown)."""

    code = "idempotency_key_in_progress"
