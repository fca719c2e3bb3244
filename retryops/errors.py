"""The one base of every domain error, so one API exception handler and one admin message path
can render any of them: `code` is stable for machines, `str(error)` is a sentence for people,
`details` names what was wrong (the field, the resource, the state)."""


class DomainError(Exception):
    """An illegal transition or bad input, raised by a service; never a bare ValueError."""

    code = "domain_error"

    def __init__(self, message: str, *, code: str | None = None, **details):
        super().__init__(message)
        if code:
            self.code = code
        self.details = details

    def as_dict(self) -> dict:
        """What an API answers and a log line carries."""
        return {"code": self.code, "message": str(self), "details": self.details}


class BadInput(DomainError, ValueError):
    """A value a service cannot take (empty, out of range, unstorable, naming no row); details:
    `field`. Each app's bad-input error derives from it; also a ValueError, so form validation
    and older callers that catch ValueError keep working."""

    code = "bad_input"

    def __init__(self, message: str, *, field: str, **details):
        super().__init__(message, field=field, **details)
        self.field = field


class NotFound(DomainError):
    """No row with that id or name (answered 404); `code` says of what: task_not_found,
    pool_not_found, ..."""

    code = "not_found"


class IllegalTransition(DomainError):
    """An action the row's state does not allow; details name the row, its state and the action."""

    code = "illegal_transition"
