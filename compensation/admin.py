"""The operators' console for dead letters and bulk replays. Every state change goes through
compensation.services (actions); the columns they own are read-only. The packages' admins are
imported at the end, for the admin's autodiscovery."""

from django.contrib import admin
from django.template.defaultfilters import truncatechars
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from compensation.admin_bulk_replay import BulkReplayConsole
from compensation.admin_console import ShownAs, linked_task, work_order_shown
from compensation.admin_dead_letters import DeadLetterConsole
from compensation.models import BulkReplay, DeadLetter
from retryops import flags
from retryops.admin_filters import ReadOnlyAdmin
from scheduling.admin_filters import FlowFilter


class DlqInspectorPage:
    """A page of the dead-letter queue inspector: with the flag dlq-inspector off it is not in
    the admin index and its URLs answer 403, whatever the user's permissions. Put it before the
    ModelAdmin class in the bases."""

    def has_module_permission(self, request):
        return flags.enabled(flags.DLQ_INSPECTOR) and super().has_module_permission(request)

    def has_view_permission(self, request, obj=None):
        return flags.enabled(flags.DLQ_INSPECTOR) and super().has_view_permission(request, obj)

    def has_add_permission(self, request, *args):
        return flags.enabled(flags.DLQ_INSPECTOR) and super().has_add_permission(request, *args)

    def has_change_permission(self, request, obj=None):
        return flags.enabled(flags.DLQ_INSPECTOR) and super().has_change_permission(request, obj)

    def has_delete_permission(self, request, obj=None):
        return flags.enabled(flags.DLQ_INSPECTOR) and super().has_delete_permission(request, obj)


@admin.register(DeadLetter)
class DeadLetterAdmin(DlqInspectorPage, DeadLetterConsole, ShownAs, ReadOnlyAdmin):
    """Every field is the services'; the actions change them, and the clean-up purges them."""

    list_display = ("id", "state", "flow", "resource", "short_signature", "attempt_count", "died_at",
                    work_order_shown, "replay_shown")
    list_filter = ("state", FlowFilter, "error_category", "pool")
    list_select_related = ("resource", "work_order")
    search_fields = ("=id", "=task__id", "error_signature", "resource__key")
    show_full_result_count = False
    # A facet count per flow and pool would count the queue once per choice on every page.
    show_facets = admin.ShowFacets.NEVER
    SHOWN_AS = {"task": "task_link", "work_order": "work_order_link", "replay_task": "replay_task_link"}
    readonly_fields = [*(f.name for f in DeadLetter._meta.fields), *SHOWN_AS.values()]

    @admin.display(description=_("error signature"))
    def short_signature(self, letter):
        return truncatechars(letter.error_signature, 80)

    @admin.display(description=_("replay task"), ordering="replay_task")
    def replay_shown(self, letter):
        return gettext("task %(id)s") % {"id": letter.replay_task_id} if letter.replay_task_id else "-"

    @admin.display(description=_("task"))
    def task_link(self, letter):
        return linked_task(letter.task_id)

    @admin.display(description=_("replay task"))
    def replay_task_link(self, letter):
        return linked_task(letter.replay_task_id)


@admin.register(BulkReplay)
class BulkReplayAdmin(DlqInspectorPage, BulkReplayConsole, ReadOnlyAdmin):
    list_display = ("id", "state", "filter", "rate", "selected", "done", "refused", "requested_by", "created_at",
                    "heartbeat_at", "finished_at")
    list_filter = ("state",)
    readonly_fields = [f.name for f in BulkReplay._meta.fields]

import compensation.notifications.admin  # noqa: E402, F401
import compensation.runbooks.admin  # noqa: E402, F401
import compensation.work_orders.admin  # noqa: E402, F401
