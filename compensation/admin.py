"""The operators' console for dead letters, work orders and bulk replays. Every state change
goes through compensation.services (actions and save_model); the columns they own are read-only.
The console's pages are mixed in from their own modules: admin_dead_letters (the DLQ grouped by
flow and signature; replay, discard, resolve), admin_work_orders (a work order's page and its
transitions), admin_runbooks, admin_bulk_replay and admin_notifications."""

from django import forms
from django.contrib import admin, messages
from django.http import HttpResponseRedirect
from django.template.defaultfilters import truncatechars
from django.urls import reverse
from django.utils import timezone
from django.utils.formats import date_format
from django.utils.html import format_html
from django.utils.translation import gettext, ngettext_lazy
from django.utils.translation import gettext_lazy as _

from compensation import services
from compensation.admin_bulk_replay import BulkReplayConsole
from compensation.admin_console import run_each, work_order_link, work_order_shown
from compensation.admin_dead_letters import DeadLetterConsole
from compensation.admin_filters import (
    CompensatedAtFilter,
    CompensateDueFilter,
    CompletedInTimeFilter,
    FirstDeadFilter,
    PagedFilter,
)
from compensation.admin_work_orders import WorkOrderConsole
from compensation.choices import WORK_ORDER_LIVE
from compensation.flags import dlq_inspector_on
from compensation.models import (
    SLA_CLOCK_NAMES,
    SLA_CLOCKS,
    BulkReplay,
    DeadLetter,
    WorkOrder,
)
from compensation.runbooks.admin import RunbooksOnWorkOrder
from compensation.selectors import breached_clocks
from resources.admin import EditsWhatThePageShowed
from retryops.errors import DomainError
from scheduling.admin import ReadOnlyAdmin
from scheduling.admin_filters import FlowFilter


class DlqInspectorPage:
    """A page of the dead-letter queue inspector: with the flag dlq-inspector off it is not in
    the admin index and its URLs answer 403, whatever the user's permissions. Put it before the
    ModelAdmin class in the bases."""

    def has_module_permission(self, request):
        return dlq_inspector_on() and super().has_module_permission(request)

    def has_view_permission(self, request, obj=None):
        return dlq_inspector_on() and super().has_view_permission(request, obj)

    def has_add_permission(self, request, *args):
        return dlq_inspector_on() and super().has_add_permission(request, *args)

    def has_change_permission(self, request, obj=None):
        return dlq_inspector_on() and super().has_change_permission(request, obj)

    def has_delete_permission(self, request, obj=None):
        return dlq_inspector_on() and super().has_delete_permission(request, obj)


@admin.register(DeadLetter)
class DeadLetterAdmin(DlqInspectorPage, DeadLetterConsole, ReadOnlyAdmin):
    """Every field is the services'; the actions change them, and the clean-up purges them."""

    list_display = ("id", "state", "flow", "resource", "short_signature", "attempt_count", "died_at",
                    work_order_shown, "replay_shown")
    list_filter = ("state", FlowFilter, "error_category", "pool")
    list_select_related = ("resource", "work_order")
    search_fields = ("=id", "=task__id", "error_signature", "resource__key")
    show_full_result_count = False
    # A facet count per flow and pool would count the queue once per choice on every page.
    show_facets = admin.ShowFacets.NEVER
    # On a dead letter's page, the rows it names as the reader's language names them: their
    # __str__ stays English (audit entries keep it).
    NAMED = {"task": "task_link", "work_order": "work_order_link", "replay_task": "replay_task_link"}
    readonly_fields = [*(f.name for f in DeadLetter._meta.fields), *NAMED.values()]

    def get_fields(self, request, obj=None):
        return list(dict.fromkeys(self.NAMED.get(name, name) for name in super().get_fields(request, obj)))

    @admin.display(description=_("error signature"))
    def short_signature(self, letter):
        return truncatechars(letter.error_signature, 80)

    @admin.display(description=_("replay task"), ordering="replay_task")
    def replay_shown(self, letter):
        return gettext("task %(id)s") % {"id": letter.replay_task_id} if letter.replay_task_id else "-"

    @admin.display(description=_("task"))
    def task_link(self, letter):
        return _task_link(letter.task_id)

    @admin.display(description=_("replay task"))
    def replay_task_link(self, letter):
        return _task_link(letter.replay_task_id)

    @admin.display(description=_("work order"))
    def work_order_link(self, letter):
        return work_order_link(letter)


def _task_link(task_id: int | None) -> str:
    if task_id is None:
        return "-"
    return format_html('<a href="{}">{}</a>', reverse("admin:scheduling_task_change", args=[task_id]),
                       gettext("task %(id)s") % {"id": task_id})


class WorkOrderForm(forms.ModelForm):
    """What an operator types on a work order; the state and the clocks are the services'."""

    class Meta:
        model = WorkOrder
        fields = ["title", "flow", "pool", "assignee", "runbook", "notes", "resolution"]


@admin.register(WorkOrder)
class WorkOrderAdmin(EditsWhatThePageShowed, WorkOrderConsole, RunbooksOnWorkOrder, admin.ModelAdmin):
    form = WorkOrderForm
    list_display = ("id", "title", "state", "sla", "dead_letter_count", "assignee", "first_dead_at", "created_at",
                    "acknowledged_at", "compensated_at")
    list_filter = ("state", "source", "flow", PagedFilter, CompletedInTimeFilter, FirstDeadFilter,
                   CompensatedAtFilter, CompensateDueFilter)
    list_select_related = ("pool",)
    search_fields = ("=id", "title", "error_signature", "assignee")
    show_full_result_count = False
    actions = ["acknowledge", "start", "compensate", "close", "cancel"]
    # What an operator types on a live work order; the rest is the services'.
    _TYPED = ("assignee", "runbook", "notes", "resolution")
    _TIMES = ("first_dead_at", "last_dead_at", "created_at", "acknowledged_at", "started_at", "compensated_at",
              "ended_at", "notice_breached_at", "acknowledge_breached_at", "compensate_breached_at", "updated_at")
    _OWNED = ("title", "flow", "pool", "state", "source", "error_signature", "opened_by", "dead_letter_count",
              *_TIMES, "runbooks_panel")

    def get_readonly_fields(self, request, obj=None):
        if obj is None:
            return ()
        return self._OWNED if obj.state in WORK_ORDER_LIVE else (*self._OWNED, *self._TYPED)

    def get_fieldsets(self, request, obj=None):
        if obj is None:
            return [(None, {"fields": ["title", "flow", "pool", "assignee", "runbook", "notes"]})]
        # The state, the clocks, the dead letters and the runs are above the form (WorkOrderConsole).
        return [
            (None, {"fields": ["title", ("flow", "pool"), "error_signature", ("source", "opened_by"), *self._TYPED]}),
            (_("Runbooks"), {"fields": ["runbooks_panel"]}),
            (_("Times"), {"classes": ["collapse"], "fields": ["dead_letter_count", *self._TIMES]}),
        ]

    def has_delete_permission(self, request, obj=None):
        return False

    @admin.display(description=_("SLA"))
    def sla(self, order):
        """The clocks past their limit now (selectors.sla_of) and those escalate marked, with when
        each ran out: a marked breach stays shown after the work order moved on."""
        marked = {clock: at for clock in SLA_CLOCKS if (at := getattr(order, f"{clock}_breached_at")) is not None}
        clocks = breached_clocks(order)
        if not clocks:
            return format_html('<span style="color:{}">{}</span>', "#447e36", gettext("ok"))
        since = {clock: gettext(" (since %(at)s)") % {"at": date_format(timezone.localtime(at), "SHORT_DATETIME_FORMAT")}
                 for clock, at in marked.items()}
        return format_html('<span style="color:#ba2121">{}</span>', gettext("breached: %(clocks)s") % {
            "clocks": ", ".join(f"{SLA_CLOCK_NAMES[clock]}{since.get(clock, '')}" for clock in clocks)})

    def save_model(self, request, obj, form, change):
        actor = request.user.get_username()
        data = form.cleaned_data
        if not change:
            created = services.open_work_order(title=data["title"], actor=actor, flow=data.get("flow") or "",
                                               pool=data.get("pool"), runbook=data.get("runbook") or "",
                                               notes=data.get("notes") or "", assignee=data.get("assignee") or "")
            obj.pk = created.pk
            return
        edited = {f: data[f] for f in self._TYPED if f in form.changed_data}
        if edited:
            try:
                services.change_work_order(work_order=obj.pk, actor=actor, **edited)
            except DomainError as exc:
                # Another operator closed it since the page rendered, or the text cannot be kept:
                # said on the page it comes back to, instead of a traceback.
                request.console_refusal = exc

    def log_change(self, request, obj, message):
        if getattr(request, "console_refusal", None) is None:
            return super().log_change(request, obj, message)
        return None

    def response_change(self, request, obj):
        refusal = getattr(request, "console_refusal", None)
        if refusal is None:
            return super().response_change(request, obj)
        self.message_user(request, gettext("Nothing saved: %(reason)s") % {"reason": refusal}, messages.ERROR)
        return HttpResponseRedirect(request.path)

    def save_related(self, request, form, formsets, change):
        pass  # nothing related is edited here

    @admin.action(description=_("Acknowledge"), permissions=["change"])
    def acknowledge(self, request, queryset):
        run_each(self, request, queryset,
                 lambda pk, actor: services.acknowledge_work_order(work_order=pk, actor=actor),
                 done=work_orders_done("acknowledged"))

    @admin.action(description=_("Start compensation"), permissions=["change"])
    def start(self, request, queryset):
        run_each(self, request, queryset,
                 lambda pk, actor: services.start_work_order(work_order=pk, actor=actor),
                 done=work_orders_done("started"))

    @admin.action(description=_("Mark compensated (with the resolution typed on the work order)"),
                  permissions=["change"])
    def compensate(self, request, queryset):
        resolutions = dict(queryset.values_list("pk", "resolution"))
        run_each(self, request, queryset,
                 lambda pk, actor: services.compensate_work_order(work_order=pk, actor=actor,
                                                                  resolution=resolutions.get(pk, "")),
                 done=work_orders_done("compensated"))

    @admin.action(description=_("Close"), permissions=["change"])
    def close(self, request, queryset):
        resolutions = dict(queryset.values_list("pk", "resolution"))
        run_each(self, request, queryset,
                 lambda pk, actor: services.close_work_order(work_order=pk, actor=actor,
                                                             resolution=resolutions.get(pk, "")),
                 done=work_orders_done("closed"))

    @admin.action(description=_("Cancel (opened by mistake)"), permissions=["change"])
    def cancel(self, request, queryset):
        # The reason is kept (audit entry, resolution): in English, like all stored text.
        run_each(self, request, queryset,
                 lambda pk, actor: services.cancel_work_order(work_order=pk, actor=actor,
                                                              reason=f"cancelled in the admin by {actor}"),
                 done=work_orders_done("cancelled"))


# What a list action on work orders says it did.
WORK_ORDERS_DONE = {
    "acknowledged": ngettext_lazy("Acknowledged %(count)d work order.", "Acknowledged %(count)d work orders.",
                                  "count"),
    "started": ngettext_lazy("Started compensating %(count)d work order.",
                             "Started compensating %(count)d work orders.", "count"),
    "compensated": ngettext_lazy("Marked %(count)d work order compensated.",
                                 "Marked %(count)d work orders compensated.", "count"),
    "closed": ngettext_lazy("Closed %(count)d work order.", "Closed %(count)d work orders.", "count"),
    "cancelled": ngettext_lazy("Cancelled %(count)d work order.", "Cancelled %(count)d work orders.", "count"),
}


def work_orders_done(transition: str):
    return lambda changed: WORK_ORDERS_DONE[transition] % {"count": len(changed)}


@admin.register(BulkReplay)
class BulkReplayAdmin(DlqInspectorPage, BulkReplayConsole, ReadOnlyAdmin):
    list_display = ("id", "state", "filter", "rate", "selected", "done", "refused", "requested_by", "created_at",
                    "heartbeat_at", "finished_at")
    list_filter = ("state",)
    readonly_fields = [f.name for f in BulkReplay._meta.fields]

import compensation.notifications.admin  # noqa: E402, F401  (the notifications admin: its own package)
