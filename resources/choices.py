from django.db import models
from django.utils.translation import gettext_lazy as _
from django.utils.translation import pgettext_lazy


class ResourceState(models.TextChoices):
    AVAILABLE = "available", _("Available")
    IN_USE = "in_use", _("In use")
    DONE = "done", _("Done (consumed)")
    FAILED = "failed", _("Failed")
    QUARANTINED = "quarantined", _("Quarantined")


class FailureCategory(models.TextChoices):
    RETRYABLE = "retryable", _("Retryable")
    NON_RETRYABLE = "non_retryable", _("Non-retryable")


class Outcome(models.TextChoices):
    SUCCESS = "success", _("Success")
    FAILURE = "failure", _("Failure")


class EventKind(models.TextChoices):
    CLAIMED = "claimed", _("Claimed")
    RELEASED_SUCCESS = "released_success", _("Released with success")
    RELEASED_FAILURE = "released_failure", _("Released with failure")
    HELD_FOR_RETRY = "held_for_retry", _("Failed, held for its retry")
    RELEASED_UNUSED = "released_unused", _("Released unused")
    RESET = "reset", _("Reset")
    QUARANTINED = "quarantined", _("Quarantined")
    UNQUARANTINED = "unquarantined", _("Released from quarantine")
    LEASE_EXPIRED = "lease_expired", _("Lease expired")
    PROBE_CLAIMED = "probe_claimed", _("Claimed for a probation probe")


class Diagnosis(models.TextChoices):
    """Whose fault a failing resource's failures look like (resources.selectors.annotate_diagnosis)."""

    ENVIRONMENT = "environment", pgettext_lazy("diagnosis", "Environment")
    RESOURCE = "resource", pgettext_lazy("diagnosis", "Resource")
    UNCLEAR = "unclear", pgettext_lazy("diagnosis", "Unclear")


class LeaseKind(models.TextChoices):
    """What a lease is for. Only a use counts towards the statistics when the sweeper takes it back:
    a reservation or a probe lease whose attempt never started, or a hold kept after a failure
    (already counted), ran nothing on the resource."""

    USE = "use", _("In use by its holder")
    RESERVATION = "reservation", _("Reserved for a task")
    HOLD = "hold", _("Held for a retry")
    PROBE = "probe", _("Claimed for a probation probe")
