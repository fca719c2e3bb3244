from django.db import models
from django.utils.translation import gettext_lazy as _


class TaskState(models.TextChoices):
    PENDING = "pending", _("Pending")
    SCHEDULED = "scheduled", _("Scheduled")
    RUNNING = "running", _("Running")
    SUCCEEDED = "succeeded", _("Succeeded")
    RETRYING = "retrying", _("Retrying")
    DEAD = "dead", _("Dead")
    CANCELLED = "cancelled", _("Cancelled")


# States in which a task waits for a job to run its next attempt: the dispatcher's work.
WAITING_STATES = (TaskState.PENDING, TaskState.SCHEDULED, TaskState.RETRYING)
TERMINAL_STATES = (TaskState.SUCCEEDED, TaskState.DEAD, TaskState.CANCELLED)


class AttemptOutcome(models.TextChoices):
    RUNNING = "running", _("Running")
    SUCCEEDED = "succeeded", _("Succeeded")
    FAILED = "failed", _("Failed")
    ABANDONED = "abandoned", _("Abandoned (worker lost)")


class Backoff(models.TextChoices):
    FIXED = "fixed", _("Fixed")
    EXPONENTIAL = "exponential", _("Exponential")
    EXPONENTIAL_JITTER = "exponential_jitter", _("Exponential with full jitter")


class PatternAction(models.TextChoices):
    RETRY_SAME_RESOURCE = "retry_same_resource", _("Retry on the same resource")
    RETRY_OTHER_RESOURCE = "retry_other_resource", _("Retry on another resource")
    QUARANTINE = "quarantine", _("Quarantine the resource")
    DEAD_LETTER = "dead_letter", _("Dead-letter at once")


class TaskEventKind(models.TextChoices):
    EXECUTION_FAILED = "task.execution.failed", _("Execution failed")
    RETRY_SCHEDULED = "task.retry.scheduled", _("Retry scheduled")
    RETRY_SUCCEEDED = "task.retry.succeeded", _("Retry succeeded")
    DEAD = "task.dead", _("Dead")
    CANCELLED = "task.cancelled", _("Cancelled")
    RUN_NOW = "task.run_now", _("Run now (operator)")
    # An attempt's flow ended after the attempt was given up as lost: its worker still ran it.
    # Details say whether the outcome was kept (a success no newer attempt had overtaken).
    LATE_OUTCOME = "task.outcome.late", _("Outcome after the attempt was given up")
