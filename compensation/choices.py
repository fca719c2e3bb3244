from django.db import models


class DeadLetterState(models.TextChoices):
    OPEN = "open", "Open"
    REPLAYING = "replaying", "Replaying"
    REPLAYED = "replayed", "Replayed"
    RESOLVED = "resolved", "Resolved"
    DISCARDED = "discarded", "Discarded"


# A replay can start only from an open dead letter; a replay that dies brings it back to open.
REPLAYABLE_STATES = (DeadLetterState.OPEN,)
# What the cleanup may archive or purge by default: nobody has anything left to do with them.
SETTLED_STATES = (DeadLetterState.REPLAYED, DeadLetterState.RESOLVED, DeadLetterState.DISCARDED)


class WorkOrderState(models.TextChoices):
    OPEN = "open", "Open"
    ACKNOWLEDGED = "acknowledged", "Acknowledged"
    IN_PROGRESS = "in_progress", "In progress"
    COMPENSATED = "compensated", "Compensated"
    CLOSED = "closed", "Closed"
    CANCELLED = "cancelled", "Cancelled"


# A work order in one of these is finished: new dead letters of its signature open a new one.
WORK_ORDER_TERMINAL = (WorkOrderState.COMPENSATED, WorkOrderState.CLOSED, WorkOrderState.CANCELLED)
WORK_ORDER_LIVE = (WorkOrderState.OPEN, WorkOrderState.ACKNOWLEDGED, WorkOrderState.IN_PROGRESS)


class WorkOrderSource(models.TextChoices):
    DEAD_LETTERS = "dead_letters", "Opened by dead letters"
    MANUAL = "manual", "Opened by an operator"


class BulkReplayState(models.TextChoices):
    RUNNING = "running", "Running"
    FINISHED = "finished", "Finished"
    CANCELLED = "cancelled", "Cancelled"
