"""Dead letters (tasks that died), the work orders that group them for an operator, and bulk replays."""

from django.db import models
from django.db.models import F, Q
from django.db.models.functions import Coalesce
from django.utils.translation import gettext_lazy as _

from compensation.choices import (
    WORK_ORDER_LIVE,
    BulkReplayState,
    DeadLetterState,
    WorkOrderSource,
    WorkOrderState,
)
from resources.models import Resource, ResourcePool
from scheduling.models import Task

# Where a work order's SLA clocks start: its first dead letter, or its opening for one opened by hand.
SLA_START = Coalesce(F("first_dead_at"), F("created_at"))
# The SLA clocks, in the order they stop; each has a RETRYOPS_SLA_<CLOCK>_SECONDS limit and a
# <clock>_breached_at field that escalation marks.
SLA_CLOCKS = ("notice", "acknowledge", "compensate")


class WorkOrder(models.Model):
    """What an operator has to compensate: a group of dead letters of one flow and error
    signature, or a case opened by hand; with its SLA clock (dead letter -> opened ->
    acknowledged -> compensated)."""

    title = models.CharField(max_length=300)
    source = models.CharField(max_length=20, choices=WorkOrderSource.choices, default=WorkOrderSource.MANUAL)
    flow = models.CharField(max_length=100, blank=True)
    error_signature = models.CharField(max_length=500, blank=True)
    pool = models.ForeignKey(ResourcePool, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    state = models.CharField(max_length=20, choices=WorkOrderState.choices, default=WorkOrderState.OPEN)
    assignee = models.CharField(max_length=200, blank=True)
    runbook = models.CharField(max_length=200, blank=True, help_text="The runbook the operator follows, by name.")
    notes = models.TextField(blank=True)
    resolution = models.TextField(blank=True)
    opened_by = models.CharField(max_length=200)
    dead_letter_count = models.PositiveIntegerField(default=0)
    first_dead_at = models.DateTimeField(null=True, blank=True, help_text="When its first dead letter's task died.")
    last_dead_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    acknowledged_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    compensated_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True, help_text="When it was compensated, closed or cancelled.")
    # Marked once by compensation.services.escalation, at the moment the clock ran out (its start
    # plus the limit), so a late escalate run does not move the breach.
    notice_breached_at = models.DateTimeField(
        null=True, blank=True, help_text="When its notice SLA ran out with no trigger page sent.")
    acknowledge_breached_at = models.DateTimeField(
        null=True, blank=True, help_text="When its acknowledge SLA ran out while it was still open.")
    compensate_breached_at = models.DateTimeField(
        null=True, blank=True, help_text="When its compensate SLA ran out while it was still live.")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-id"]
        constraints = [
            models.CheckConstraint(condition=Q(state__in=WorkOrderState.values), name="work_order_state_valid"),
            models.CheckConstraint(condition=Q(source__in=WorkOrderSource.values), name="work_order_source_valid"),
            # The grouping: one live work order per flow and error signature collects their dead
            # letters; a second collector racing to open it hits this and joins the first.
            models.UniqueConstraint(
                fields=["flow", "error_signature"],
                condition=Q(source=WorkOrderSource.DEAD_LETTERS, state__in=WORK_ORDER_LIVE),
                name="work_order_one_live_per_signature",
            ),
            models.CheckConstraint(
                condition=Q(state=WorkOrderState.OPEN) | Q(acknowledged_at__isnull=False)
                | Q(state__in=[WorkOrderState.CLOSED, WorkOrderState.CANCELLED]),
                name="work_order_acknowledged_has_time",
            ),
            models.CheckConstraint(
                condition=~Q(state=WorkOrderState.COMPENSATED) | Q(compensated_at__isnull=False),
                name="work_order_compensated_has_time",
            ),
            models.CheckConstraint(
                condition=Q(state__in=WORK_ORDER_LIVE) | Q(ended_at__isnull=False),
                name="work_order_ended_has_time",
            ),
            # Every SLA clock starts at the first dead letter (at the opening for a manual work
            # order) and runs at least a second: a breach before that is a bug, not a breach.
            models.CheckConstraint(
                condition=(Q(notice_breached_at__isnull=True) | Q(notice_breached_at__gt=SLA_START))
                & (Q(acknowledge_breached_at__isnull=True) | Q(acknowledge_breached_at__gt=SLA_START))
                & (Q(compensate_breached_at__isnull=True) | Q(compensate_breached_at__gt=SLA_START)),
                name="work_order_breach_after_clock_start",
            ),
        ]
        indexes = [
            # The on-call's list and the SLA checks: live work orders, oldest first.
            models.Index(fields=["created_at"], condition=Q(state__in=WORK_ORDER_LIVE), name="work_order_live_idx"),
        ]

    def __str__(self) -> str:
        return f"work order {self.pk}"


class DeadLetter(models.Model):
    """A task that died (retries exhausted or a failure not worth retrying), kept for an operator
    to replay, resolve or discard."""

    # One dead letter per task: a second delivery of its task.dead event changes nothing.
    task = models.OneToOneField(Task, on_delete=models.CASCADE, related_name="dead_letter")
    flow = models.CharField(max_length=100)
    pool = models.ForeignKey(ResourcePool, on_delete=models.PROTECT, related_name="+", db_index=False)
    # Null once the resource is removed: the dead letter outlives it, and says so when replayed.
    resource = models.ForeignKey(Resource, null=True, blank=True, on_delete=models.SET_NULL, related_name="+",
                                 db_index=False)
    last_error = models.TextField(blank=True)
    error_signature = models.CharField(max_length=500, blank=True)
    error_category = models.CharField(max_length=20, blank=True)
    attempt_count = models.PositiveIntegerField(default=0)
    died_at = models.DateTimeField()
    state = models.CharField(max_length=20, choices=DeadLetterState.choices, default=DeadLetterState.OPEN)
    work_order = models.ForeignKey(WorkOrder, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="dead_letters")
    # The latest replay; earlier ones are in the audit log.
    replay_task = models.ForeignKey(Task, null=True, blank=True, on_delete=models.SET_NULL, related_name="replay_of")
    replay_count = models.PositiveIntegerField(default=0)
    settled_at = models.DateTimeField(null=True, blank=True, help_text="When it was replayed, resolved or discarded.")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
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
        ]

    def __str__(self) -> str:
        return f"dead letter {self.pk}"


class BulkReplay(models.Model):
    """One request to replay the open dead letters matching a filter, at a velocity limit; its
    progress survives the process that runs it, which resumes from `last_dead_letter_id`."""

    filter = models.JSONField(default=dict, help_text="flow, error_signature, pool, resource, died_after, died_before")
    # The canonical filter, hashed: what "the same filter" means for the one-running constraint.
    filter_key = models.CharField(max_length=64)
    rate = models.FloatField(help_text="Replays per second at most.")
    any_resource = models.BooleanField(default=False)
    state = models.CharField(max_length=20, choices=BulkReplayState.choices, default=BulkReplayState.RUNNING)
    requested_by = models.CharField(max_length=200)
    selected = models.PositiveIntegerField(default=0, help_text="Open dead letters matching when it started.")
    done = models.PositiveIntegerField(default=0, help_text="Replays started.")
    refused = models.PositiveIntegerField(default=0, help_text="Dead letters that refused (quarantined, consumed...).")
    last_dead_letter_id = models.BigIntegerField(default=0)
    last_error = models.TextField(blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
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


from compensation.notifications_models import Notification  # noqa: E402, F401  (notifications: their own module)
from compensation.runbook_models import RunbookRun  # noqa: E402, F401  (runbooks: their own module)
