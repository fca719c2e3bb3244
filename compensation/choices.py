from django.db import models
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _


class DeadLetterState(models.TextChoices):
    OPEN = "open", _("Open")
    REPLAYING = "replaying", _("Replaying")
    REPLAYED = "replayed", _("Replayed")
    RESOLVED = "resolved", _("Resolved")
    DISCARDED = "discarded", _("Discarded")


# A replay can start only from an open dead letter; a replay that dies brings it back to open.
REPLAYABLE_STATES = (DeadLetterState.OPEN,)


class WorkOrderState(models.TextChoices):
    OPEN = "open", _("Open")
    ACKNOWLEDGED = "acknowledged", _("Acknowledged")
    IN_PROGRESS = "in_progress", _("In progress")
    COMPENSATED = "compensated", _("Compensated")
    CLOSED = "closed", _("Closed")
    CANCELLED = "cancelled", _("Cancelled")


# A work order in one of these is finished: new dead letters of its signature open a new one.
WORK_ORDER_TERMINAL = (WorkOrderState.COMPENSATED, WorkOrderState.CLOSED, WorkOrderState.CANCELLED)
WORK_ORDER_LIVE = (WorkOrderState.OPEN, WorkOrderState.ACKNOWLEDGED, WorkOrderState.IN_PROGRESS)


class WorkOrderSource(models.TextChoices):
    DEAD_LETTERS = "dead_letters", _("Opened by dead letters")
    MANUAL = "manual", _("Opened by an operator")


class BulkReplayState(models.TextChoices):
    RUNNING = "running", _("Running")
    FINISHED = "finished", _("Finished")
    CANCELLED = "cancelled", _("Cancelled")


class Named:
    """Mixed into a model: `display_name`, its name in the reader's language ("dead letter 7");
    its __str__ stays English (audit entries and pages keep it)."""

    @property
    def display_name(self) -> str:
        return gettext("%(name)s %(id)s") % {"name": self._meta.verbose_name, "id": self.pk}


def state_words(choices: type[models.TextChoices], *states: str) -> str:
    """States as a sentence names them, in the reader's language: "acknowledged or in progress"."""
    return gettext(" or ").join(str(choices(state).label).lower() for state in states)
