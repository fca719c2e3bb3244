"""Domain errors of the resource pool. Each carries a sentence an operator can act on."""

from retryops.errors import DomainError


class ResourceError(DomainError):
    """Base class of the pool's errors: `code` is stable for machines, `str(error)` is for people."""

    code = "resource_error"


class PoolNotFound(ResourceError):
    code = "pool_not_found"


class ResourceNotFound(ResourceError):
    code = "resource_not_found"


class PoolExhausted(ResourceError):
    code = "pool_exhausted"


class ResourceUnavailable(ResourceError):
    """A named resource cannot be claimed; `code` is in_use, quarantined, done, failed or missing."""

    code = "unavailable"

    def __init__(self, message: str, *, code: str, resource_id: int | None = None):
        super().__init__(message, code=code, resource_id=resource_id)
        self.resource_id = resource_id


class LeaseMismatch(ResourceError):
    code = "lease_mismatch"


class IllegalTransition(ResourceError):
    code = "illegal_transition"
