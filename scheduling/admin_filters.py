"""List filters shared by the console's lists of tasks and of what tasks leave behind."""

from django.contrib import admin
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from retryops.admin_filters import FigureFilter, time_range_filter
from scheduling.choices import WAITING_STATES, TaskEventKind
from scheduling.flows import known_flows
from scheduling.selectors import RETRY_OUTCOMES, late_retry_starts, retry_sla_grace


class FlowFilter(admin.SimpleListFilter):
    """The flows this deployment knows, from their registry: Django's own filter would read the
    distinct flows of the whole table on every page view, a full scan of millions of tasks. A flow
    named in the URL but no longer registered is still offered, so its old rows stay findable."""

    title = _("flow")
    parameter_name = "flow"

    def lookups(self, request, model_admin):
        flows = known_flows()
        chosen = self.value()
        if chosen and chosen not in flows:
            flows = sorted([*flows, chosen])
        return [(name, name) for name in flows]

    def queryset(self, request, queryset):
        value = self.value()
        return queryset if value is None else queryset.filter(flow=value)


class RetryStartFilter(FigureFilter):
    """Retries (attempt 2 and up) that started within their SLA or late (scheduling.selectors.late_retry_starts)."""

    title = _("retry start")
    parameter_name = "retry_start"

    def lookups(self, request, model_admin):
        return [("on_time", _("Within its SLA")), ("late", _("Later than its SLA"))]

    def select(self, queryset, value):
        retries = queryset.filter(number__gt=1, scheduled_for__isnull=False)
        return late_retry_starts(retries, late=value == "late")


class RetryOverdueFilter(FigureFilter):
    """Tasks waiting for a retry past its due time plus the SLA grace (scheduling.selectors.overdue_retries)."""

    title = _("retry waiting")
    parameter_name = "retry_overdue"

    def lookups(self, request, model_admin):
        return [("yes", _("Past its SLA, not started"))]

    def select(self, queryset, value):
        deadline = timezone.now() - retry_sla_grace()
        return queryset.filter(state__in=WAITING_STATES, attempt_count__gte=1, next_run_at__lte=deadline)


class RetryEndFilter(FigureFilter):
    """Task events that end a retry, as scheduling.selectors.retry_outcomes counts them."""

    title = _("retry ended")
    parameter_name = "retry"

    def lookups(self, request, model_admin):
        return [("ended", _("Any way")), ("succeeded", _("Succeeded")), ("failed", _("Failed"))]

    def select(self, queryset, value):
        kinds = {"ended": list(RETRY_OUTCOMES), "succeeded": [TaskEventKind.RETRY_SUCCEEDED],
                 "failed": [TaskEventKind.RETRY_SCHEDULED, TaskEventKind.DEAD]}[value]
        return queryset.filter(kind__in=kinds, attempt_number__gt=1)


ScheduledForFilter = time_range_filter("scheduled_for", _("due"))
NextRunFilter = time_range_filter("next_run_at", _("next run at"))
EventTimeFilter = time_range_filter("created_at", _("created at"))
