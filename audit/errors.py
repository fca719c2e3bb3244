"""Errors of the audit app: programming mistakes in a call of record_audit, never bad data
(values PostgreSQL cannot store are repaired, so an audit row never fails a business action);
and refusals of its API clients' services and of requests sent with an Idempotency-Key."""

from retryops.errors import BadInput, DomainError  # noqa: F401 (BadInput: the one bad-input error, for the app)


class AuditError(DomainError):
    code = "audit_error"


class ApiClientError(AuditError):
    """An action an API client's state does not allow."""

    code = "api_client_error"


class ApiClientNotFound(ApiClientError):
    code = "api_client_not_found"


class IdempotencyKeyReused(AuditError):
    """The Idempotency-Key was first sent with another request (method, path or body); details:
    `key`, `first_seen_at`."""

    code = "idempotency_key_reused"


class IdempotencyKeyInProgress(AuditError):
    """The first request sent with this Idempotency-Key has not been answered yet; details: `key`,
    `started_at`, `stale` (true once it has taken longer than any request may: its server stopped
    while processing it, and whether its work was done is unknown)."""

    code = "idempotency_key_in_progress"
