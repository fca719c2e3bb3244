"""Domain errors of tasks and flows. Each has a stable `code` for machines, a sentence for people,
and `details` naming what was wrong (the field, the path in a payload, the task and its state)."""

from django.utils.translation import ngettext

from retryops.errors import BadInput, DomainError  # noqa: F401 (BadInput: the one bad-input error, for the app)


def too_long(field: str, length: int, limit: int) -> str:
    """The refusal of a text longer than its column holds, in the reader's language."""
    return ngettext("%(field)s is %(length)d character long; at most %(limit)d fit",
                    "%(field)s is %(length)d characters long; at most %(limit)d fit",
                    length) % {"field": field, "length": length, "limit": limit}


class SchedulingError(DomainError):
    """Base class of the scheduling app's errors."""

    code = "scheduling_error"


class TaskError(SchedulingError, ValueError):
    """Bad input for a task; the subclasses say which kind."""

    code = "bad_task"


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


class InstanceSucceeded(SchedulingError):
    """A run of the business instance a start would run again has succeeded already (on this
    resource or another): running it again would run it a second time, unless the operator runs
    it as a new instance (as_new_instance); details: `task_id`, the run that succeeded."""

    code = "instance_succeeded"


class NotInTransaction(SchedulingError):
    """A call that is only safe inside the caller's transaction was made outside one."""

    code = "needs_transaction"
