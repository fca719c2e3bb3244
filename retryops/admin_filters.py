"""List filters and a read-only page that any app's console may use; they import no app of ours."""

from datetime import UTC, datetime

from django.contrib import admin
from django.contrib.admin.options import IncorrectLookupParameters
from django.db.models import Expression, F
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django.utils.formats import date_format
from django.utils.translation import gettext

from retryops.jsonsafe import check_text


def parse_moment(raw: str, *, name: str) -> datetime:
    """An ISO 8601 time from a query string (a naive one is in the current time zone), or
    IncorrectLookupParameters naming the parameter: the admin then shows its "incorrect
    parameters" page instead of failing."""
    try:
        moment = parse_datetime(raw) if isinstance(raw, str) and not check_text(raw) else None
    except (ValueError, OverflowError):
        moment = None
    if moment is None:
        raise IncorrectLookupParameters(f"{name} must be an ISO 8601 time, got {raw!r}")
    try:
        if timezone.is_naive(moment):
            moment = timezone.make_aware(moment)
        # Shown in the reader's time zone and compared in UTC: both must exist.
        moment.astimezone(UTC), timezone.localtime(moment)
    except (ValueError, OverflowError):
        raise IncorrectLookupParameters(f"{name} is out of range: {raw!r}") from None
    return moment


class FigureFilter(admin.SimpleListFilter):
    """A filter the acceptance figures' links set (telemetry.figures.selectors): offered in the sidebar only
    while it is set, so the lists keep their usual filters, and dropped with "All"."""

    def has_output(self):
        return self.value() is not None

    def queryset(self, request, queryset):
        value = self.value()
        if value is None:
            return queryset
        if value not in dict(self.lookup_choices):
            raise IncorrectLookupParameters(f"{self.parameter_name} must be one of "
                                            f"{', '.join(dict(self.lookup_choices))}, got {value!r}")
        return self.select(queryset, value)

    def select(self, queryset, value):
        raise NotImplementedError


class TimeRangeFilter(admin.ListFilter):
    """Rows whose time lies between `<parameter>__gte` and `<parameter>__lte` (ISO 8601, both
    ends included, either may be left out): how a link such as an acceptance figure's selects
    exactly the rows behind it. Shown in the sidebar only while it is set, with the range in the
    reader's time zone and "Any time" to drop it. Subclasses name the parameter and the field, or
    override `expression` for a time the table computes (a deadline)."""

    parameter: str = ""
    field: str = ""

    def __init__(self, request, params, model, model_admin):
        super().__init__(request, params, model, model_admin)
        self.bounds: dict[str, datetime] = {}
        for suffix in ("gte", "lte"):
            name = f"{self.parameter}__{suffix}"
            if name in params:
                raw = params.pop(name)[-1]
                self.used_parameters[name] = raw
                self.bounds[suffix] = parse_moment(raw, name=name)

    def expression(self) -> Expression:
        return F(self.field)

    def expected_parameters(self) -> list[str]:
        return [f"{self.parameter}__gte", f"{self.parameter}__lte"]

    def has_output(self) -> bool:
        return bool(self.bounds)

    def queryset(self, request, queryset):
        if not self.bounds:
            return queryset
        alias = f"_{self.parameter}_time"
        queryset = queryset.alias(**{alias: self.expression()}) if self.field == "" else queryset
        column = alias if self.field == "" else self.field
        return queryset.filter(**{f"{column}__{suffix}": moment for suffix, moment in self.bounds.items()})

    def _shown(self, suffix: str) -> str:
        moment = self.bounds.get(suffix)
        return date_format(timezone.localtime(moment), "DATETIME_FORMAT") if moment else "…"

    def choices(self, changelist):
        yield {"selected": False, "query_string": changelist.get_query_string(remove=self.expected_parameters()),
               "display": gettext("Any time")}
        yield {"selected": True, "query_string": changelist.get_query_string(),
               "display": gettext("%(since)s to %(until)s") % {"since": self._shown("gte"),
                                                                "until": self._shown("lte")}}


def time_range_filter(field: str, title, *, parameter: str | None = None, expression=None) -> type[TimeRangeFilter]:
    """A TimeRangeFilter of one field (or of `expression`, under `parameter`), titled `title`."""
    attributes = {"title": title, "parameter": parameter or field, "field": "" if expression is not None else field}
    if expression is not None:
        attributes["expression"] = lambda self: expression()
    return type(f"TimeRange_{parameter or field}", (TimeRangeFilter,), attributes)


class ReadOnlyAdmin(admin.ModelAdmin):
    """A page of rows that only services write: nothing is added, changed or deleted here."""

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
