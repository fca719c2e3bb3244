"""Dead letters (tasks that died) and bulk replays; the work orders, runbook runs and notifications
are in their own packages, imported here so that Django finds them."""

from django.db import models
from django.db.models import Q
from django.utils.translation import gettext_lazy as _

from compensation.choices import BulkReplayState, DeadLetterState, Named
from compensation.work_orders.models import WorkOrder
from resources.choices import FailureCategory
from resources.models import Resource, ResourcePool
from scheduling.models import Task, TransactionIdField


class DeadLetter(Named, models.Model):
    """A task that died (retries exhausted or a failure not worth retrying), kept for an operator
    to replay, resolve or discard."""

    # One dead letter per task: a second collection of its dead task makes nothing.
    task = models.OneToOneField(Task, verbose_name=_("task"), on_delete=models.CASCADE, related_name="dead_letter")
    flow = models.CharField(_("flow"), max_length=100)
    pool = models.ForeignKey(ResourcePool, verbose_name=_("pool"), on_delete=models.PROTECT, related_name="+",
                             db_index=False)
    # Null once the resource is removed: the dead letter outlives it, and says so when replayed.
    resource = models.ForeignKey(Resource, verbose_name=_("resource"), null=True, blank=True, on_delete=models.SET_NULL,
                                 related_name="+", db_index=False)
    last_error = models.TextField(_("last error"), blank=True)
    error_signature = models.CharField(_("error signature"), max_length=500, blank=True)
    error_category = models.CharField(_("error category"), max_length=20, blank=True, choices=FailureCategory.choices)
    attempt_count = models.PositiveIntegerField(_("attempt count"), default=0)
    died_at = models.DateTimeField(_("died at"))
    state = models.CharField(_("state"), max_length=20, choices=DeadLetterState.choices, default=DeadLetterState.OPEN)
    work_order = models.ForeignKey(WorkOrder, verbose_name=_("work order"), null=True, blank=True,
                                   on_delete=models.SET_NULL, related_name="dead_letters")
    # The latest replay; earlier ones are in the audit log.
    replay_task = models.ForeignKey(Task, verbose_name=_("replay task"), null=True, blank=True,
                                    on_delete=models.SET_NULL, related_name="replay_of")
    replay_count = models.PositiveIntegerField(_("replay count"), default=0)
    settled_at = models.DateTimeField(_("settled at"), null=True, blank=True,
                                      help_text=_("When it was replayed, resolved or discarded."))
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)
    # The transaction that collected it (and put it on its work order): telemetry rolls dead letters
    # up into task_retry_escalated_total and dead_letter_to_work_order_seconds by it, as task events by theirs.
    xid = TransactionIdField(
        _("transaction id"), db_default=models.Func(function="pg_current_xact_id", output_field=TransactionIdField()),
        editable=False)

    class Meta:
        verbose_name = _("dead letter")
        verbose_name_plural = _("dead letters")
        ordering = ["-id"]
        # The console's actions on dead letters (compensation.admin checks them on the server);
        # discarding covers resolving too: both settle a dead letter without a replay.
        permissions = [
            ("replay_deadletter", _("Can replay a dead letter")),
            ("discard_deadletter", _("Can discard or resolve a dead letter")),
        ]
        constraints = [
            models.CheckConstraint(condition=Q(state__in=DeadLetterState.values), name="dead_letter_state_valid"),
            models.CheckConstraint(
                condition=~Q(state__in=[DeadLetterState.REPLAYING, DeadLetterState.REPLAYED])
                | Q(replay_task__isnull=False),
                name="dead_letter_replay_has_task",
            ),
            models.CheckConstraint(
                condition=Q(state__in=[DeadLetterState.OPEN, DeadLetterState.REPLAYING]) | Q(settled_at__isnull=False),
                name="dead_letter_settled_has_time",
            ),
        ]
        indexes = [
            # The cleanup and the bulk replays: dead letters of a state by age, in id ranges.
            models.Index(fields=["state", "died_at"], name="dead_letter_state_age_idx"),
            # The DLQ by flow and signature (retry_inspect, bulk replay filters).
            models.Index(fields=["flow", "error_signature"], name="dead_letter_signature_idx"),
            # follow_replays: the replays still under way.
            models.Index(fields=["id"], condition=Q(state=DeadLetterState.REPLAYING), name="dead_letter_replaying_idx"),
            # telemetry's metrics rollup and scrape: the dead letters collected since the rollup's watermark.
            models.Index(fields=["xid"], name="dead_letter_xid_idx"),
        ]

    def __str__(self) -> str:
        return f"dead letter {self.pk}"


class BulkReplay(Named, models.Model):
    """One request to replay the open dead letters matching a filter, at a velocity limit; its
    progress survives the process that runs it, which resumes from `last_dead_letter_id`."""

    filter = models.JSONField(_("filter"), default=dict,
                              help_text=_("flow, error_signature, pool, resource, died_after, died_before"))
    # The canonical filter, hashed: what "the same filter" means for the one-running constraint.
    filter_key = models.CharField(_("filter key"), max_length=64)
    rate = models.FloatField(_("rate"), help_text=_("Replays per second at most."))
    any_resource = models.BooleanField(_("any resource"), default=False)
    state = models.CharField(_("state"), max_length=20, choices=BulkReplayState.choices,
                             default=BulkReplayState.RUNNING)
    requested_by = models.CharField(_("requested by"), max_length=200)
    selected = models.PositiveIntegerField(_("selected"), default=0,
                                           help_text=_("Open dead letters matching when it started."))
    done = models.PositiveIntegerField(_("done"), default=0, help_text=_("Replays started."))
    refused = models.PositiveIntegerField(_("refused"), default=0,
                                          help_text=_("Dead letters that refused (quarantined, consumed...)."))
    last_dead_letter_id = models.BigIntegerField(_("last dead letter id"), default=0)
    last_error = models.TextField(_("last error"), blank=True)
    heartbeat_at = models.DateTimeField(_("heartbeat at"), null=True, blank=True)
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)
    finished_at = models.DateTimeField(_("finished at"), null=True, blank=True)

    class Meta:
        verbose_name = _("bulk replay")
        verbose_name_plural = _("bulk replays")
        ordering = ["-id"]
        constraints = [
            models.CheckConstraint(condition=Q(state__in=BulkReplayState.values), name="bulk_replay_state_valid"),
            models.CheckConstraint(condition=Q(rate__gte=1, rate__lte=500), name="bulk_replay_rate_in_range"),
            # As SQS allows one redrive per queue: one running bulk replay per filter.
            models.UniqueConstraint(fields=["filter_key"], condition=Q(state=BulkReplayState.RUNNING),
                                    name="bulk_replay_one_running_per_filter"),
            models.CheckConstraint(
                condition=Q(state=BulkReplayState.RUNNING) | Q(finished_at__isnull=False),
                name="bulk_replay_finished_has_time",
            ),
        ]

    def __str__(self) -> str:
        return f"bulk replay {self.pk}"


from compensation.notifications.models import Notification  # noqa: E402, F401  (notifications: their own package)
from compensation.runbooks.models import RunbookRun  # noqa: E402, F401  (runbooks: their own package)
