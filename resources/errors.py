"""Domain errors of the resource pool. Each carries a sentence an operator can act on (`str(error)`),
a stable `code` for machines, and `details` naming what was wrong (the pool, the resource, the field)."""

from retryops.errors import BadInput, DomainError


class ResourceError(DomainError):
    """Base class of the pool's errors: `code` is stable for machines, `str(error)` is for people."""

    code = "resource_error"


class NameTaken(BadInput):
    """Another pool has this name: the request is well formed and the state refuses it (409). Still
    BadInput, so a form names the field."""

    code = "name_taken"


class KeyTaken(BadInput):
    """The pool has a resource with this key already (`taken`); as NameTaken."""

    code = "key_taken"


class PoolNotFound(ResourceError):
    code = "pool_not_found"

    def __init__(self, message: str, *, pool):
        super().__init__(message, pool=pool)


class ResourceNotFound(ResourceError):
    code = "resource_not_found"

    def __init__(self, message: str, *, resource_id: int | None = None, pool=None, key: str | None = None):
        super().__init__(message, resource_id=resource_id, pool=pool, key=key)
        self.resource_id = resource_id


class PoolExhausted(ResourceError):
    """No resource of the pool can be claimed now; `counts` says what they are doing ({state: n})."""

    code = "pool_exhausted"

    def __init__(self, message: str, *, pool: str, counts: dict[str, int]):
        super().__init__(message, pool=pool, counts=counts)


class ResourceUnavailable(ResourceError):
    """A named resource cannot be claimed. `reason` says why: in_use (it may free up: retry),
    quarantined, done or missing (it will not). `holder` and `until` (ISO 8601) say who holds an
    in-use one and until when, `since` when a quarantined or done one became so."""

    code = "resource_unavailable"
    REASONS = ("in_use", "quarantined", "done", "missing")

    def __init__(self, message: str, *, reason: str, resource_id: int | None = None, holder: str | None = None,
                 until: str | None = None, since: str | None = None):
        super().__init__(message, reason=reason, resource_id=resource_id, holder=holder, until=until, since=since)
        self.reason = reason
        self.resource_id = resource_id


class LeaseMismatch(ResourceError):
    """A lease token that does not hold the resource; `why` is expired, released or never_granted."""

    code = "lease_mismatch"
    WHY = ("expired", "released", "never_granted")

    def __init__(self, message: str, *, why: str, resource_id: int | None = None, lease_token: str | None = None):
        super().__init__(message, why=why, resource_id=resource_id, lease_token=lease_token)
        self.why = why


class ResourceChanged(ResourceError):
    """A change sent with the versions of the resource its sender read (the API's If-Match), to a
    resource that has changed since; `version` is the one it is at now."""

    code = "precondition_failed"

    def __init__(self, message: str, *, resource_id: int, version: str):
        super().__init__(message, resource_id=resource_id, version=version)


class IllegalTransition(ResourceError):
    """An action the resource's state does not allow; details name the state and the action."""

    code = "illegal_transition"

    def __init__(self, message: str, *, state: str, action: str, resource_id: int | None = None):
        super().__init__(message, state=state, action=action, resource_id=resource_id)
        self.state = state
        self.action = action
