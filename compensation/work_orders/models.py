"""Work orders: what an operator has to compensate, with its SLA clocks. Changed only by
compensation.work_orders.services."""

from django.db import models
from django.db.models import F, Q
from django.db.models.functions import Coalesce
from django.utils.translation import pgettext_lazy
from django.utils.translation import gettext_lazy as _

from compensation.choices import WORK_ORDER_LIVE, Named, WorkOrderSource, WorkOrderState
from resources.models import ResourcePool

# Where a work order's SLA clocks start: its first dead letter, or its opening for one opened by hand.
SLA_START = Coalesce(F("first_dead_at"), F("created_at"))
# The SLA clocks, in the order they stop; each has a RETRYOPS_SLA_<CLOCK>_SECONDS limit and a
# <clock>_breached_at field that escalation marks.
SLA_CLOCKS = ("notice", "acknowledge", "compensate")
# Each clock as the console names it ("breached: acknowledge").
SLA_CLOCK_NAMES = {
    "notice": pgettext_lazy("SLA clock", "notice"),
    "acknowledge": pgettext_lazy("SLA clock", "acknowledge"),
    "compensate": pgettext_lazy("SLA clock", "compensate"),
}


class WorkOrder(Named, models.Model):
    """What an operator has to compensate: a group of dead letters of one flow and error
    signature, or a case opened by hand; with its SLA clock (dead letter -> opened ->
    acknowledged -> compensated)."""

    title = models.CharField(_("title"), max_length=300)
    source = models.CharField(_("source"), max_length=20, choices=WorkOrderSource.choices,
                              default=WorkOrderSource.MANUAL)
    flow = models.CharField(_("flow"), max_length=100, blank=True)
    error_signature = models.CharField(_("error signature"), max_length=500, blank=True)
    pool = models.ForeignKey(ResourcePool, verbose_name=_("pool"), null=True, blank=True, on_delete=models.SET_NULL,
                             related_name="+")
    state = models.CharField(_("state"), max_length=20, choices=WorkOrderState.choices, default=WorkOrderState.OPEN)
    assignee = models.CharField(_("assignee"), max_length=200, blank=True)
    runbook = models.CharField(_("runbook"), max_length=200, blank=True,
                               help_text=_("The runbook the operator follows, by name."))
    notes = models.TextField(_("notes"), blank=True)
    resolution = models.TextField(_("resolution"), blank=True)
    opened_by = models.CharField(_("opened by"), max_length=200)
    dead_letter_count = models.PositiveIntegerField(_("dead letter count"), default=0)
    first_dead_at = models.DateTimeField(_("first dead at"), null=True, blank=True,
                                         help_text=_("When its first dead letter's task died."))
    last_dead_at = models.DateTimeField(_("last dead at"), null=True, blank=True)
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)
    acknowledged_at = models.DateTimeField(_("acknowledged at"), null=True, blank=True)
    started_at = models.DateTimeField(_("started at"), null=True, blank=True)
    compensated_at = models.DateTimeField(_("compensated at"), null=True, blank=True)
    ended_at = models.DateTimeField(_("ended at"), null=True, blank=True,
                                    help_text=_("When it was compensated, closed or cancelled."))
    # Marked once by compensation.services.escalation, at the moment the clock ran out (its start
    # plus the limit), so a late escalate run does not move the breach.
    notice_breached_at = models.DateTimeField(
        _("notice breached at"), null=True, blank=True,
        help_text=_("When its notice SLA ran out with no trigger page sent."))
    acknowledge_breached_at = models.DateTimeField(
        _("acknowledge breached at"), null=True, blank=True,
        help_text=_("When its acknowledge SLA ran out while it was still open."))
    compensate_breached_at = models.DateTimeField(
        _("compensate breached at"), null=True, blank=True,
        help_text=_("When its compensate SLA ran out while it was still live."))
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)

    class Meta:
        verbose_name = _("work order")
        verbose_name_plural = _("work orders")
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
