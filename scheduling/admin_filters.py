"""List filters shared by the console's lists of tasks and of what tasks leave behind."""

from django.contrib import admin
from django.utils.translation import gettext_lazy as _

from scheduling.flows import known_flows


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
