"""List filters shared by the console's lists of tasks and of what tasks leave behind."""

from datetime import timedelta

from django.contrib import admin, messages
from django.template.defaultfilters import truncatechars
from django.utils import timezone
from django.utils.translation import gettext, ngettext
from django.utils.translation import gettext_lazy as _

from retryops.admin_filters import FigureFilter, time_range_filter
from retryops.errors import BadInput
from scheduling.analysis import window_days
from scheduling.choices import WAITING_STATES, AttemptOutcome, TaskEventKind

from scheduling.flows import known_flows
from scheduling.models import Attempt, RetryPolicy
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


class PolicyFilter(admin.SimpleListFilter):
    """The retry policy of the task (of the attempt's task, with `field` = "task__policy"): the
    policies are few, so they are listed from their own table."""

    title = _("retry policy")
    parameter_name = "policy"
    field = "policy"

    def lookups(self, request, model_admin):
        return [(str(pk), name) for pk, name in RetryPolicy.objects.order_by("name").values_list("pk", "name")]

    def queryset(self, request, queryset):
        value = self.value()
        if value is None:
            return queryset
        if not (value.isascii() and value.isdigit()) or len(value) > 18:
            messages.error(request, gettext("policy must be a retry policy's id, got %(value)r") % {"value": value})
            return queryset.none()
        return queryset.filter(**{f"{self.field}_id": int(value)})


class AttemptPolicyFilter(PolicyFilter):
    field = "task__policy"


class FailedWithFilter(admin.SimpleListFilter):
    """Failures of one exact error signature within the last `failed_within_days` days (the
    transience page's links; default RETRYOPS_TRANSIENCE_WINDOW_DAYS): attempts that failed so,
    or, for tasks (`narrow_tasks`), the tasks with such an attempt. Signatures are too many to
    list: only the chosen one is offered. Served by attempt_failure_signature_idx."""

    title = _("failed with error signature")
    parameter_name = "signature"
    days_parameter = "failed_within_days"
    narrow_tasks = False

    def __init__(self, request, params, model, model_admin):
        # Its own second parameter: the admin refuses a parameter no filter takes.
        self.days_value = params.pop(self.days_parameter, [None])[-1]
        super().__init__(request, params, model, model_admin)

    def expected_parameters(self):
        return [self.parameter_name, self.days_parameter]

    def lookups(self, request, model_admin):
        value = self.value()
        self.days = None
        if not value:
            return []
        try:
            self.days = days = window_days(self.days_value)
        except BadInput as exc:
            messages.error(request, str(exc))
            return [(value, truncatechars(value, 60))]
        label = ngettext("%(signature)s, in the last day", "%(signature)s, in the last %(days)d days", days)
        return [(value, label % {"signature": truncatechars(value, 60), "days": days})]

    def choices(self, changelist):
        every, *chosen = super().choices(changelist)
        # "All" drops the window with the signature.
        return [{**every, "query_string": changelist.get_query_string(remove=self.expected_parameters())}, *chosen]

    def queryset(self, request, queryset):
        value = self.value()
        if value is None:
            return queryset
        if self.days is None:  # said why in lookups
            return queryset.none()
        failed = {"outcome__in": [AttemptOutcome.FAILED, AttemptOutcome.ABANDONED], "error_signature": value,
                  "started_at__gte": timezone.now() - timedelta(days=self.days)}
        if self.narrow_tasks:
            return queryset.filter(pk__in=Attempt.objects.filter(**failed).values("task_id"))
        return queryset.filter(**failed)


class TaskFailedWithFilter(FailedWithFilter):
    narrow_tasks = True
