from django.db import models


class TaskState(models.TextChoices):
    PENDING = "pending", "Pending"
    SCHEDULED = "scheduled", "Scheduled"
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"
    RETRYING = "retrying", "Retrying"
    DEAD = "dead", "Dead"
    CANCELLED = "cancelled", "Cancelled"


# States in which a task waits for a job to run its next attempt: the dispatcher's work.
WAITING_STATES = (TaskState.PENDING, TaskState.SCHEDULED, TaskState.RETRYING)
TERMINAL_STATES = (TaskState.SUCCEEDED, TaskState.DEAD, TaskState.CANCELLED)


class AttemptOutcome(models.TextChoices):
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    ABANDONED = "abandoned", "Abandoned (worker lost)"


class Backoff(models.TextChoices):
    FIXED = "fixed", "Fixed"
    EXPONENTIAL = "exponential", "Exponential"
    EXPONENTIAL_JITTER = "exponential_jitter", "Exponential with full jitter"


class PatternAction(models.TextChoices):
    RETRY_SAME_RESOURCE = "retry_same_resource", "Retry on the same resource"
    RETRY_OTHER_RESOURCE = "retry_other_resource", "Retry on another resource"
    QUARANTINE = "quarantine", "Quarantine the resource"
    DEAD_LETTER = "dead_letter", "Dead-letter at once"


class TaskEventKind(models.TextChoices):
    EXECUTION_FAILED = "task.execution.failed", "Execution failed"
    RETRY_SCHEDULED = "task.retry.scheduled", "Retry scheduled"
    RETRY_SUCCEEDED = "task.retry.succeeded", "Retry succeeded"
    DEAD = "task.dead", "Dead"
    CANCELLED = "task.cancelled", "Cancelled"
    RUN_NOW = "task.run_now", "Run now (operator)"
