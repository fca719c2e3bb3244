"""Domain errors of tasks and flows. Each has a stable `code` for machines, a sentence for people,
and `details` naming what was wrong (the field, the path in a payload, the task and its state)."""

from retryops import errors
from retryops.errors import DomainError


class SchedulingError(DomainError):
    """Base class of the scheduling app's errors."""

    code = "scheduling_error"


class TaskError(SchedulingError, ValueError):
    """Bad input for a task; the subclasses say which kind."""

    code = "bad_task"


class BadInput(TaskError, errors.BadInput):
    """A value no column can hold or no one can act on; details: `field`."""

    code = "bad_input"


class FlowNotFound(TaskError):
    """A flow no setting and no decorator registered; details: `flow`."""

    code = "unknown_flow"


class BadPayload(TaskError):
    """A payload that is not a JSON object PostgreSQL can store; details: `path` (payload.items[2].price)."""

    code = "bad_payload"


class UnknownPolicy(TaskError):
    """A retry policy name that is not loaded; details: `policy`."""

    code = "unknown_policy"


class BadPolicy(TaskError):
    """A policy definition that cannot be used (from the YAML file, the admin or a task's own
    policy); details: the `field` to blame, and the `source` and `entry` of a YAML file."""

    code = "bad_policy"


class TaskNotFound(SchedulingError):
    code = "task_not_found"


class IllegalTaskTransition(SchedulingError):
    """An action the task's state does not allow; details: `task_id`, `state`, `action`."""

    code = "illegal_transition"


class TaskLive(SchedulingError):
    """A task that has not finished already runs on (or waits for) the resource; details:
    `task_id`, `state`, `next_run_at`, `holder` (the task as the resource's holder) and `until`
    (when its lease on the resource ends, if it holds one)."""

    code = "task_live"


class NotInTransaction(SchedulingError):
    """A call that is only safe inside the caller's transaction was made outside one."""

    code = "needs_transaction"
