from django.db import models
from django.utils.translation import gettext_lazy as _


class ResourceState(models.TextChoices):
    AVAILABLE = "available", "Available"
    IN_USE = "in_use", "In use"
    DONE = "done", "Done (consumed)"
    FAILED = "failed", "Failed"
    QUARANTINED = "quarantined", "Quarantined"


class FailureCategory(models.TextChoices):
    RETRYABLE = "retryable", "Retryable"
    NON_RETRYABLE = "non_retryable", "Non-retryable"


class Outcome(models.TextChoices):
    SUCCESS = "success", "Success"
    FAILURE = "failure", "Failure"


class EventKind(models.TextChoices):
    CLAIMED = "claimed", "Claimed"
    RELEASED_SUCCESS = "released_success", "Released with success"
    RELEASED_FAILURE = "released_failure", "Released with failure"
    HELD_FOR_RETRY = "held_for_retry", "Failed, held for its retry"
    RELEASED_UNUSED = "released_unused", "Released unused"
    RESET = "reset", "Reset"
    QUARANTINED = "quarantined", "Quarantined"
    UNQUARANTINED = "unquarantined", "Released from quarantine"
    LEASE_EXPIRED = "lease_expired", "Lease expired"
    PROBE_CLAIMED = "probe_claimed", "Claimed for a probation probe"


class Diagnosis(models.TextChoices):
    """Whose fault a failing resource's failures look like (resources.selectors.annotate_diagnosis)."""

    ENVIRONMENT = "environment", _("Environment")
    RESOURCE = "resource", _("Resource")
    UNCLEAR = "unclear", _("Unclear")


class LeaseKind(models.TextChoices):
    """What a lease is for. Only a use counts towards the statistics when the sweeper takes it back:
    a reservation or a probe lease whose attempt never started, or a hold kept after a failure
    (already counted), ran nothing on the resource."""

    USE = "use", "In use by its holder"
    RESERVATION = "reservation", "Reserved for a task"
    HOLD = "hold", "Held for a retry"
    PROBE = "probe", "Claimed for a probation probe"
