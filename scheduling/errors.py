"""Domain errors of tasks and flows whose code no other app's error has (the shared ones are
retryops.errors'). Each has a stable `code` for machines, a sentence for people,
and `details` naming what was wrong (the field, the path in a payload, the task and its state)."""

from django.utils.translation import ngettext

from retryops.errors import DomainError


def too_long(field: str, length: int, limit: int) -> str:
    """The refusal of a text longer than its column holds, in the reader's language."""
    return ngettext("%(field)s is %(length)d character long; at most %(limit)d fit",
                    "%(field)s is %(length)d characters long; at most %(limit)d fit",
                    length) % {"field": field, "length": length, "limit": limit}


class FlowNotFound(DomainError, ValueError):
    """A flow no setting and no decorator registered; details: `flow`."""

    code = "unknown_flow"


class BadPayload(DomainError, ValueError):
    """A payload that is not a JSON object PostgreSQL can store; details: `path` (payload.items[2].price)."""

    code = "bad_payload"


class UnknownPolicy(DomainError, ValueError):
    """A retry policy name that is not loaded; details: `policy`."""

    code = "unknown_policy"


class BadPolicy(DomainError, ValueError):
    """A policy definition that cannot be used (from the YAML file, the admin or a task's own
    policy); details: the `field` to blame, and the `source` and `entry` of a YAML file."""

    code = "bad_policy"


class TaskLive(DomainError):
    """A task that has not finished already runs on (or waits for) the resource; details:
    `task_id`, `state`, `next_run_at`, `holder` (the task as the resource's holder) and `until`
    (when its lease on the resource ends, if it holds one)."""

    code = "task_live"


class InstanceSucceeded(DomainError):
    """A run of the business instance a start would run again has succeeded already (on this
    resource or another): running it again would run it a second time, unless the operator runs
    it as a new instance (as_new_instance); details: `task_id`, the run that succeeded."""

    code = "instance_succeeded"
