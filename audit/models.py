"""The audit log: one append-only row per operator, API or command action."""

from django.contrib.postgres.indexes import BrinIndex
from django.core.serializers.json import DjangoJSONEncoder
from django.db import models
from django.db.models import Q
from django.db.models.functions import Now
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from audit.choices import Channel

# "<noun>.<verb>", lower case: the shape of every AuditAction value.
ACTION_PATTERN = r"^[a-z][a-z_]*\.[a-z][a-z_]*$"


class AuditEntry(models.Model):
    """Who did what to which object, through which channel, with the object before and after.

    Written by the services in the transaction of the change (audit.services.record_audit). A
    trigger (migration 0002) refuses UPDATE, DELETE and TRUNCATE, so no code path can rewrite it.
    The id is a sequence, so entries are numbered in the order they were written (the order a
    later outbox streams them in); note that a sequence number is taken at insert, not at commit.
    """

    id = models.BigAutoField(_("id"), primary_key=True)
    # The database's clock at the statement (STATEMENT_TIMESTAMP), not a caller's: nobody can
    # back-date an entry, and entries of one transaction keep their order in time.
    created_at = models.DateTimeField(_("created at"), db_default=Now(), editable=False)
    actor = models.CharField(_("actor"), max_length=200,
                             help_text=_("A user name, a command's --actor or OS user, or system."))
    channel = models.CharField(_("channel"), max_length=20, choices=Channel.choices)
    action = models.CharField(_("action"), max_length=100,
                              help_text=_("<noun>.<verb>, one of audit.choices.AuditAction."))
    target_type = models.CharField(_("target type"), max_length=100,
                                   help_text=_("The target's model, as app_label.model_name."))
    target_id = models.CharField(_("target id"), max_length=100)
    target_label = models.CharField(_("target label"), max_length=200, blank=True,
                                    help_text=_("How the target read at the time."))
    before = models.JSONField(_("before"), null=True, blank=True,
                              help_text=_("The target's fields before; null: it did not exist."))
    after = models.JSONField(_("after"), null=True, blank=True,
                             help_text=_("The target's fields after; null: it no longer exists."))
    reason = models.TextField(_("reason"), blank=True)
    request_id = models.CharField(_("request id"), max_length=100, blank=True,
                                  help_text=_("The web request's X-Request-ID, or the command or job run's id."))
    # What had to change so PostgreSQL could store before/after (a NaN became null, ...).
    repairs = models.JSONField(_("repairs"), default=list, blank=True)

    class Meta:
        verbose_name = _("audit entry")
        verbose_name_plural = _("audit entries")
        ordering = ["-id"]
        constraints = [
            models.CheckConstraint(condition=Q(channel__in=Channel.values), name="audit_channel_valid"),
            models.CheckConstraint(condition=Q(action__regex=ACTION_PATTERN), name="audit_action_noun_verb"),
            models.CheckConstraint(condition=~Q(actor="") & ~Q(target_type="") & ~Q(target_id=""),
                                   name="audit_actor_and_target_named"),
        ]
        indexes = [
            # A target's history, newest first (history_of, the target's admin page); also the
            # admin's target type filter, which walks its distinct leading values.
            models.Index(fields=["target_type", "target_id", "-id"], name="audit_target_history_idx"),
            # Everything one request, command or job run did (entries_of_request, admin search).
            models.Index(fields=["request_id"], name="audit_request_idx"),
            # Recent entries by time ("last 7 days"): rows arrive in time order and are never
            # updated, which is exactly where a BRIN index is tiny and exact enough. Newest first
            # without a time range is the primary key, read backwards.
            BrinIndex(fields=["created_at"], name="audit_created_brin"),
        ]

    def __str__(self) -> str:
        return gettext("%(action)s of %(type)s %(id)s by %(actor)s") % {
            "action": self.action, "type": self.target_type, "id": self.target_id, "actor": self.actor}

# The Redis streams the outbox publishes to (audit.streaming): audit entries, task events.
AUDIT_STREAM = "retryops:audit"
EVENTS_STREAM = "retryops:events"
STREAMS = (AUDIT_STREAM, EVENTS_STREAM)


class StreamMessage(models.Model):
    """One entry waiting for, or already given to, a Redis stream (audit.streaming): an outbox.

    Written in the transaction of the change it describes (record_audit, scheduling's emit), so an
    entry exists exactly when its change committed, whether or not Redis answers; the publisher
    adds it to its stream and sets `published_at`. Published rows are deleted after a day.
    """

    id = models.BigAutoField(primary_key=True)
    stream = models.CharField(max_length=50, help_text="The Redis stream: retryops:audit or retryops:events.")
    event = models.CharField(max_length=100, help_text="The entry's `event` field: an audit action or task event kind.")
    payload = models.JSONField(encoder=DjangoJSONEncoder, help_text="The entry's `data` field; its `id` is the entry's id.")
    created_at = models.DateTimeField(db_default=Now(), editable=False)
    published_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["id"]
        constraints = [
            models.CheckConstraint(condition=Q(stream__in=STREAMS), name="stream_message_stream_known"),
            models.CheckConstraint(condition=Q(payload__has_key="id"), name="stream_message_payload_has_id"),
        ]
        indexes = [
            # The publisher's read: unpublished rows in id order. Rows leave it once published,
            # so it stays the size of the backlog (empty while Redis keeps up).
            models.Index(fields=["id"], condition=Q(published_at__isnull=True), name="stream_message_unpublished_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.event} {self.payload.get('id')} for {self.stream}"
