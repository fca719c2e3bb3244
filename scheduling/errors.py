"""Domain errors of tasks and flows. Each has a stable `code` for machines and a sentence for people."""

from retryops.errors import DomainError


class SchedulingError(DomainError):
    """Base class of the scheduling app's errors."""

    code = "scheduling_error"


class TaskError(SchedulingError, ValueError):
    """Bad input for a task (unknown flow, payload that is not a JSON object, unknown policy)."""

    code = "bad_task"
