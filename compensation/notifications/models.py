"""The notification outbox: one row per message to one channel (a Slack post, a PagerDuty event),
written in the transaction that made it necessary and sent afterwards by
compensation.notifications.services.send_due_notifications. Like Healthchecks' Notification rows, it is
the record of what the on-call was told, when, and what the receiver answered."""

from django.db import models
from django.db.models import Q
from django.db.models.functions import Now
from django.utils.translation import gettext_lazy as _


class NotificationChannel(models.TextChoices):
    SLACK = "slack", "Slack"
    PAGERDUTY = "pagerduty", "PagerDuty"


class NotificationEvent(models.TextChoices):
    # PagerDuty's event actions: trigger opens (or updates) an incident, resolve closes it.
    TRIGGER = "trigger", _("Trigger")
    RESOLVE = "resolve", _("Resolve")


class NotificationSubject(models.TextChoices):
    """What a notification is about: a work order (the on-call's page about dead letters), or one
    of telemetry's alerts. The subject's id is in subject_id, without a foreign key to either."""

    WORK_ORDER = "work_order", _("Work order")
    ALERT = "alert", _("Alert")


class NotificationState(models.TextChoices):
    QUEUED = "queued", _("Queued")
    SENT = "sent", _("Sent")
    FAILED = "failed", _("Failed")
    SKIPPED = "skipped", _("Skipped (channel not configured)")


# PagerDuty refuses a longer dedup_key.
MAX_DEDUP_KEY_LENGTH = 255
# The most times escalate may queue one failed notification again (RETRYOPS_NOTIFY_MAX_RESENDS is
# far below it): a counter past it is a loop, not a receiver being down.
MAX_RESENDS = 100


class Notification(models.Model):
    """One message to one channel about one subject (a work order or an alert).

    The payload is built when the row is queued, so what is sent is what the operator sees here;
    secrets (the webhook URL, the routing key) are added at send time and never stored."""

    id = models.BigAutoField(_("ID"), primary_key=True)
    created_at = models.DateTimeField(_("created at"), db_default=Now(), editable=False)
    channel = models.CharField(_("channel"), max_length=20, choices=NotificationChannel.choices)
    event = models.CharField(_("event"), max_length=20, choices=NotificationEvent.choices)
    dedup_key = models.CharField(_("dedup key"), max_length=MAX_DEDUP_KEY_LENGTH,
                                 help_text=_("Ties the trigger and the resolve of one incident together."))
    subject_type = models.CharField(_("subject type"), max_length=20, choices=NotificationSubject.choices,
                                    default=NotificationSubject.WORK_ORDER,
                                    db_default=NotificationSubject.WORK_ORDER)
    # The work order's or the alert's id, without a foreign key: notifications neither depend on
    # those models (an alert lives in an app above this one) nor keep them from being deleted.
    subject_id = models.BigIntegerField(_("subject id"),
                                        help_text=_("The work order or the alert this notification is about."))
    subject_label = models.CharField(_("subject label"), max_length=200, blank=True)
    payload = models.JSONField(_("payload"), help_text=_("The body sent, without the webhook URL or routing key."))
    state = models.CharField(_("state"), max_length=20, choices=NotificationState.choices,
                             default=NotificationState.QUEUED)
    attempts = models.PositiveIntegerField(_("attempts"), default=0, help_text=_("Sends tried so far."))
    next_attempt_at = models.DateTimeField(_("next attempt at"), null=True, blank=True,
                                           help_text=_("When a queued notification is sent."))
    last_attempt_at = models.DateTimeField(_("last attempt at"), null=True, blank=True)
    last_error = models.TextField(_("last error"), blank=True,
                                  help_text=_("Why the last send failed, or why it was skipped."))
    last_status_code = models.PositiveSmallIntegerField(_("last status code"), null=True, blank=True,
                                                        help_text=_("The receiver's last HTTP status."))
    sent_at = models.DateTimeField(_("sent at"), null=True, blank=True)
    resends = models.PositiveIntegerField(
        _("resends"), default=0,
        help_text=_("Times escalate queued it again after it had failed (RETRYOPS_NOTIFY_MAX_RESENDS at most)."))

    class Meta:
        verbose_name = _("notification")
        verbose_name_plural = _("notifications")
        ordering = ["-id"]
        constraints = [
            models.CheckConstraint(condition=Q(channel__in=NotificationChannel.values),
                                   name="notification_channel_valid"),
            models.CheckConstraint(condition=Q(event__in=NotificationEvent.values), name="notification_event_valid"),
            models.CheckConstraint(condition=Q(state__in=NotificationState.values), name="notification_state_valid"),
            models.CheckConstraint(condition=Q(subject_type__in=NotificationSubject.values),
                                   name="notification_subject_type_valid"),
            models.CheckConstraint(condition=~Q(dedup_key=""), name="notification_dedup_key_named"),
            # A queued row is always due at some time, and only a queued row is: the sender
            # finds its work by next_attempt_at alone.
            models.CheckConstraint(condition=Q(state=NotificationState.QUEUED, next_attempt_at__isnull=False)
                                   | (~Q(state=NotificationState.QUEUED) & Q(next_attempt_at__isnull=True)),
                                   name="notification_due_iff_queued"),
            models.CheckConstraint(condition=~Q(state=NotificationState.SENT) | Q(sent_at__isnull=False),
                                   name="notification_sent_has_time"),
            models.CheckConstraint(condition=Q(resends__gte=0, resends__lte=MAX_RESENDS),
                                   name="notification_resends_in_range"),
        ]
        indexes = [
            # The sender's claim: due queued rows, oldest first.
            models.Index(fields=["next_attempt_at"], condition=Q(state=NotificationState.QUEUED),
                         name="notification_due_idx"),
            # The claim's "an earlier message of this incident is still queued" check, which keeps
            # a resolve behind its trigger.
            models.Index(fields=["dedup_key", "channel", "id"], condition=Q(state=NotificationState.QUEUED),
                         name="notification_incident_idx"),
            # What the on-call was told about one work order or alert (its page, the admin search,
            # escalation's notice clock and its "latest word of the incident" check).
            models.Index(fields=["subject_type", "subject_id", "id"], name="notification_subject_idx"),
            # The failed ones, which stay visible until someone sends them again (admin filter, alerts).
            models.Index(fields=["id"], condition=Q(state=NotificationState.FAILED), name="notification_failed_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.get_channel_display()} {self.event} for {self.subject_label or self.dedup_key}"
