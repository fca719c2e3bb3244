"""The resource list of the console: its filters, its paginator and its ChangeList, built to cost
a fixed number of queries per page on a table of 100,000 resources and more (bench/admin.py)."""

from datetime import timedelta

from django.contrib import admin
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.views.main import ChangeList
from django.core.paginator import Paginator
from django.db.models import F
from django.utils import timezone
from django.utils.functional import cached_property
from django.utils.translation import gettext_lazy as _

from resources.choices import Diagnosis
from resources.selectors import (
    annotate_diagnosis,
    estimated_row_count,
    failed_since,
    filter_diagnosis,
)

# Below this many rows an exact count(*) costs next to nothing, and is exact.
ESTIMATE_ABOVE = 10_000

# Never-failed (or never-succeeded) resources sort as the oldest: last in a newest-first list, not
# first as PostgreSQL's NULLS FIRST for DESC would put them. resource_last_failure_idx is built in
# exactly this order, so both directions of "last failure" are an index scan.
NULLS_AS_OLDEST = {
    f"{sign}{field}": F(field).desc(nulls_last=True) if sign == "-" else F(field).asc(nulls_first=True)
    for field in ("last_failure_at", "last_success_at") for sign in ("", "-")
}


class EstimatedCountPaginator(Paginator):
    """Counts a filtered or searched list exactly, and estimates the unfiltered list of a big table
    from pg_class.reltuples instead of reading every row; `estimated` says which (the page says
    "about")."""

    estimated = False

    @cached_property
    def count(self) -> int:
        query = getattr(self.object_list, "query", None)
        if query is not None and not query.where:
            estimate = estimated_row_count(self.object_list.model)
            if estimate is not None and estimate >= ESTIMATE_ABOVE:
                self.estimated = True
                return estimate
        return Paginator.count.func(self)


class ResourceChangeList(ChangeList):
    """The admin's list, with each row's diagnosis in the rows' own query and never-failed
    resources sorted as the oldest."""

    def get_queryset(self, request, exclude_parameters=None):
        return annotate_diagnosis(super().get_queryset(request, exclude_parameters))

    def get_ordering(self, request, queryset):
        return [NULLS_AS_OLDEST.get(field, field) if isinstance(field, str) else field
                for field in super().get_ordering(request, queryset)]


class DiagnosisFilter(admin.SimpleListFilter):
    title = _("diagnosis")
    parameter_name = "diagnosis"

    def lookups(self, request, model_admin):
        return Diagnosis.choices

    def queryset(self, request, queryset):
        value = self.value()
        if value is None:
            return queryset
        if value not in Diagnosis.values:
            raise IncorrectLookupParameters(value)
        return filter_diagnosis(queryset, value)


class FailedWithinFilter(admin.SimpleListFilter):
    """Resources whose latest failure is recent (resource_last_failure_idx)."""

    title = _("last failure")
    parameter_name = "failed_within"
    PERIODS = {"hour": timedelta(hours=1), "day": timedelta(days=1)}

    def lookups(self, request, model_admin):
        return [("hour", _("in the last hour")), ("day", _("in the last day"))]

    def queryset(self, request, queryset):
        value = self.value()
        if value is None:
            return queryset
        if value not in self.PERIODS:
            raise IncorrectLookupParameters(value)
        return failed_since(queryset, timezone.now() - self.PERIODS[value])
