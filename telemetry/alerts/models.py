"""Alerts: one row per rule (telemetry.alerts.rules.RULES) with its state and its last reading, and
the history of its firings and resolutions. Written only by telemetry.alerts.evaluate_alert."""

from django.db import models
from django.db.models import F, Q
from django.db.models.functions import Now
from django.utils.translation import gettext_lazy as _
from django.utils.translation import pgettext_lazy

MAX_RULE_LENGTH = 50
MAX_DETAIL_LENGTH = 2000


class AlertState(models.TextChoices):
    OK = "ok", pgettext_lazy("alert state", "OK")
    FIRING = "firing", pgettext_lazy("alert state", "Firing")


class AlertEventKind(models.TextChoices):
    FIRED = "fired", pgettext_lazy("alert event", "Fired")
    RESOLVED = "resolved", pgettext_lazy("alert event", "Resolved")


# Every value is a count or a ratio; this bound also keeps NaN and infinity out (PostgreSQL
# orders NaN above every number). A reading the rule could not judge stores no value.
MAX_VALUE = 1e15
_IN_RANGE = Q(value__isnull=True) | Q(value__gte=0, value__lte=MAX_VALUE)


class Alert(models.Model):
    """One alert rule's state: firing or ok since when, and what its last evaluation read."""

    id = models.BigAutoField(_("ID"), primary_key=True)
    rule = models.CharField(_("rule"), max_length=MAX_RULE_LENGTH, unique=True)
    state = models.CharField(_("state"), max_length=20, choices=AlertState.choices, default=AlertState.OK)
    since = models.DateTimeField(_("since"), db_default=Now(), help_text=_("When it entered its state."))
    value = models.FloatField(_("value"), null=True, blank=True,
                              help_text=_("What the last evaluation read; empty when it could not judge."))
    threshold = models.FloatField(_("threshold"), help_text=_("It fires above this value."))
    clear_level = models.FloatField(_("clear level"),
                                    help_text=_("A firing alert resolves once its value has stayed at or below this."))
    clear_since = models.DateTimeField(_("clear since"), null=True, blank=True,
                                       help_text=_("Firing, and at or below its clear level since then."))
    detail = models.CharField(_("detail"), max_length=MAX_DETAIL_LENGTH, blank=True,
                              help_text=_("What the last evaluation saw, as the notification says it."))
    # What the rule's `describe` says `detail` from, in the reader's language in the admin.
    facts = models.JSONField(_("facts"), default=dict, blank=True)
    evaluated_at = models.DateTimeField(_("evaluated at"), null=True, blank=True)

    class Meta:
        verbose_name = _("alert")
        verbose_name_plural = _("alerts")
        ordering = ["id"]
        constraints = [
            models.CheckConstraint(condition=Q(state__in=AlertState.values), name="alert_state_valid"),
            models.CheckConstraint(condition=~Q(rule=""), name="alert_rule_named"),
            # Only a firing alert can be on its way to resolving.
            models.CheckConstraint(condition=Q(state=AlertState.FIRING) | Q(clear_since__isnull=True),
                                   name="alert_clearing_only_when_firing"),
            models.CheckConstraint(condition=_IN_RANGE, name="alert_value_in_range"),
            models.CheckConstraint(condition=Q(threshold__gte=0, threshold__lte=MAX_VALUE, clear_level__gte=0,
                                                 clear_level__lte=F("threshold")),
                                   name="alert_levels_in_range"),
        ]

    def __str__(self) -> str:
        return f"alert {self.rule}"


class AlertEvent(models.Model):
    """One firing or resolution of an alert, with the value that made it: the alert's history."""

    id = models.BigAutoField(_("ID"), primary_key=True)
    alert = models.ForeignKey(Alert, verbose_name=_("alert"), on_delete=models.CASCADE, related_name="events",
                              db_index=False)
    kind = models.CharField(_("kind"), max_length=20, choices=AlertEventKind.choices)
    at = models.DateTimeField(_("at"), db_default=Now())
    value = models.FloatField(_("value"), null=True, blank=True)
    level = models.FloatField(_("level crossed"),
                              help_text=_("The threshold it went above, or the clear level it stayed at or below."))
    detail = models.CharField(_("detail"), max_length=MAX_DETAIL_LENGTH, blank=True)
    facts = models.JSONField(_("facts"), default=dict, blank=True)

    class Meta:
        verbose_name = _("alert event")
        verbose_name_plural = _("alert events")
        ordering = ["-id"]
        constraints = [
            models.CheckConstraint(condition=Q(kind__in=AlertEventKind.values), name="alert_event_kind_valid"),
            models.CheckConstraint(condition=_IN_RANGE, name="alert_event_value_in_range"),
            models.CheckConstraint(condition=Q(level__gte=0, level__lte=MAX_VALUE), name="alert_event_level_in_range"),
        ]
        indexes = [
            # An alert's history, newest first (its admin page, the history list filtered by alert).
            models.Index(fields=["alert", "-id"], name="alert_event_history_idx"),
        ]

    def __str__(self) -> str:
        return f"alert {self.alert_id} {self.kind}"
