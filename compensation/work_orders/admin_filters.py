"""The work order list's filters that the acceptance figures' links set (telemetry.figures.selectors):
each selects the rows compensation.selectors gives the figure, and shows only while it is set."""

from django.db.models import Exists
from django.utils.translation import gettext_lazy as _

from compensation.choices import WorkOrderState
from compensation.selectors import compensate_due, completed_by_due, first_page_sent
from retryops.admin_filters import FigureFilter, time_range_filter

FirstDeadFilter = time_range_filter("first_dead_at", _("first dead at"))
CompensatedAtFilter = time_range_filter("compensated_at", _("compensated at"))
CompensateDueFilter = time_range_filter("compensate_due", _("compensate SLA runs out"), expression=compensate_due)


class PagedFilter(FigureFilter):
    """Whether a trigger page about the work order reached a channel (compensation.selectors.first_page_sent)."""

    title = _("on-call paged")
    parameter_name = "paged"

    def lookups(self, request, model_admin):
        return [("yes", _("Yes")), ("no", _("Not yet"))]

    def select(self, queryset, value):
        paged = Exists(first_page_sent())
        return queryset.filter(paged) if value == "yes" else queryset.exclude(paged)


class CompletedInTimeFilter(FigureFilter):
    """Work orders to complete (any but the cancelled: "due"), and whether they were compensated
    or closed before their compensate SLA ran out (compensation.selectors.work_orders_due)."""

    title = _("completed within the compensate SLA")
    parameter_name = "completed"

    def lookups(self, request, model_admin):
        return [("due", _("To complete (not cancelled)")), ("yes", _("Yes")), ("no", _("No"))]

    def select(self, queryset, value):
        due = queryset.exclude(state=WorkOrderState.CANCELLED).annotate(compensate_due=compensate_due())
        if value == "due":
            return due
        return due.filter(completed_by_due()) if value == "yes" else due.exclude(completed_by_due())
