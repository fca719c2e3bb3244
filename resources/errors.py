"""Domain errors of the resource pool. Each carries a sentence an operator can act on (`str(error)`),
a stable `code` for machines, and `details` naming what was wrong (the pool, the resource, the field)."""

from retryops.errors import DomainError, NotFound


class ResourceNotFound(NotFound):
    """No such resource: a NotFound of its own, because claims and releases that find their
    resource gone carry on."""

    code = "resource_not_found"

    def __init__(self, message: str, *, resource_id: int | None = None, pool=None, key: str | None = None):
        super().__init__(message, resource_id=resource_id, pool=pool, key=key)
        self.resource_id = resource_id


class PoolExhausted(DomainError):
    """No resource of the pool can be claimed now; `counts` says what they are doing ({state: n})."""

    code = "pool_exhausted"

    def __init__(self, message: str, *, pool: str, counts: dict[str, int]):
        super().__init__(message, pool=pool, counts=counts)


class ResourceUnavailable(DomainError):
    """A named resource cannot be claimed. `reason` says why: in_use (it may free up: retry),
    quarantined, done or missing (it will not). `holder` and `until` (ISO 8601) say who holds an
    in-use one and until when, `since` when a quarantined or done one became so."""

    code = "resource_unavailable"

    def __init__(self, message: str, *, reason: str, resource_id: int | None = None, holder: str | None = None,
                 until: str | None = None, since: str | None = None):
        super().__init__(message, reason=reason, resource_id=resource_id, holder=holder, until=until, since=since)
        self.reason = reason
        self.resource_id = resource_id


class LeaseMismatch(DomainError):
    """A lease token that does not hold the resource; `why` is expired, released or never_granted."""

    code = "lease_mismatch"

    def __init__(self, message: str, *, why: str, resource_id: int | None = None, lease_token: str | None = None):
        super().__init__(message, why=why, resource_id=resource_id, lease_token=lease_token)
        self.why = why


class ResourceChanged(DomainError):
    """A change sent with the versions of the resource its sender read (the API's If-Match), to a
    resource that has changed since; `version` is the one it is at now."""

    code = "precondition_failed"

    def __init__(self, message: str, *, resource_id: int, version: str):
        super().__init__(message, resource_id=resource_id, version=version)
