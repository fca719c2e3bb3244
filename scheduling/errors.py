"""Domain errors of tasks and flows. Each has a stable `code` for machines and a sentence for people."""


class SchedulingError(Exception):
    """Base class: `code` is stable (the API and the admin render it), `details` says what was wrong."""

    code = "scheduling_error"

    def __init__(self, message: str, *, code: str | None = None, **details):
        super().__init__(message)
        if code:
            self.code = code
        self.details = details


class TaskError(SchedulingError, ValueError):
    """Bad input for a task (unknown flow, payload that is not a JSON object, unknown policy)."""

    code = "bad_task"
