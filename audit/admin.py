"""The audit log in the admin: read-only, filterable, searchable, cheap on a table of millions."""

import json
from datetime import timedelta

from django.apps import apps
from django.contrib import admin
from django.core.paginator import Paginator
from django.template.defaultfilters import truncatechars
from django.utils import timezone
from django.utils.functional import cached_property
from django.utils.html import format_html
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from audit import selectors
from audit.choices import AuditAction
from audit.models import AuditEntry

# Past this many matches the changelist stops counting: a count(*) of a filtered audit table
# scans every match on every page view. The last pages beyond it are reached by narrowing the filter.
COUNT_CAP = 10_000


class CappedCountPaginator(Paginator):
    """Counts at most COUNT_CAP rows (a LIMITed subquery), so paging costs the same on any table size."""

    @cached_property
    def count(self) -> int:
        return min(self.object_list[: COUNT_CAP + 1].count(), COUNT_CAP)


def type_label(target_type: str) -> str:
    """"resource" for resources.resource; the raw type for a model that no longer exists."""
    try:
        return str(apps.get_model(target_type)._meta.verbose_name)
    except (LookupError, ValueError):
        return target_type


class ActionFilter(admin.SimpleListFilter):
    # The known actions, not a DISTINCT over the table (which a plain list_filter would run).
    title = _("action")
    parameter_name = "action"

    def lookups(self, request, model_admin):
        return AuditAction.choices

    def queryset(self, request, queryset):
        return queryset.filter(action=self.value()) if self.value() else queryset


class TargetTypeFilter(admin.SimpleListFilter):
    title = _("target type")
    parameter_name = "target_type"

    def lookups(self, request, model_admin):
        return [(t, type_label(t)) for t in selectors.target_types()]

    def queryset(self, request, queryset):
        return queryset.filter(target_type=self.value()) if self.value() else queryset


class ActorFilter(admin.SimpleListFilter):
    # Who acted recently, not a DISTINCT over the table; any other actor is one ?actor= away
    # (or the search box).
    title = _("actor")
    parameter_name = "actor"

    def lookups(self, request, model_admin):
        actors = selectors.recent_actors()
        chosen = self.value()
        if chosen and chosen not in actors:
            actors = sorted([*actors, chosen])
        return [(actor, actor) for actor in actors]

    def queryset(self, request, queryset):
        return queryset.filter(actor=self.value()) if self.value() else queryset


# The time filter's choices: how far back from now. Served by the BRIN index on created_at.
WITHIN = {
    "1h": (timedelta(hours=1), _("Past hour")),
    "24h": (timedelta(hours=24), _("Past 24 hours")),
    "7d": (timedelta(days=7), _("Past 7 days")),
    "30d": (timedelta(days=30), _("Past 30 days")),
}


class WithinFilter(admin.SimpleListFilter):
    # Relative to now, unlike the admin's date filter ("today", "this month"): an operator looks
    # back from an incident. An exact window is ?created_at__gte=...&created_at__lt=...
    title = _("time")
    parameter_name = "within"

    def lookups(self, request, model_admin):
        return [(key, label) for key, (_delta, label) in WITHIN.items()]

    def queryset(self, request, queryset):
        if self.value() not in WITHIN:
            return queryset
        return queryset.filter(created_at__gte=timezone.now() - WITHIN[self.value()][0])


def _json_block(value):
    if value is None:
        return "—"
    return format_html("<pre>{}</pre>", json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True))


@admin.register(AuditEntry)
class AuditEntryAdmin(admin.ModelAdmin):
    list_display = ("id", "created_at", "actor", "channel", "action_name", "target", "short_reason", "request_id")
    list_filter = (WithinFilter, ActorFilter, "channel", ActionFilter, TargetTypeFilter)
    # A facet count per choice would count the table once per actor and action.
    show_facets = admin.ShowFacets.NEVER
    search_fields = ("=request_id", "=actor", "=target_id", "target_label")
    show_full_result_count = False
    paginator = CappedCountPaginator
    fields = ("id", "created_at", "actor", "channel", "action_name", "target", "reason", "before_shown",
              "after_shown", "repairs", "request_id")
    readonly_fields = fields

    # Append-only: the database refuses changes anyway; the admin does not offer them.
    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    @admin.display(description=_("action"), ordering="action")
    def action_name(self, entry):
        return AuditAction(entry.action).label if entry.action in AuditAction.values else entry.action

    @admin.display(description=_("target"))
    def target(self, entry):
        label = f" {entry.target_label}" if entry.target_label else ""
        return gettext("%(type)s%(label)s (id %(id)s)") % {"type": type_label(entry.target_type), "label": label,
                                                            "id": entry.target_id}

    @admin.display(description=_("reason"))
    def short_reason(self, entry):
        return truncatechars(entry.reason, 80)

    @admin.display(description=_("before"))
    def before_shown(self, entry):
        return _json_block(entry.before)

    @admin.display(description=_("after"))
    def after_shown(self, entry):
        return _json_block(entry.after)
