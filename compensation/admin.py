"""The operators' console for dead letters, work orders and bulk replays. Every state change
goes through compensation.services (actions and save_model); the columns they own are read-only."""

from django import forms
from django.contrib import admin, messages
from django.template.defaultfilters import truncatechars
from django.utils import timezone
from django.utils.formats import date_format
from django.utils.html import format_html, format_html_join

from compensation import services
from compensation.admin_bulk_replay import BulkReplayConsole, bulk_replay_like_these
from compensation.admin_runbooks import RunbooksOnWorkOrder
from compensation.choices import WORK_ORDER_LIVE
from compensation.flags import dlq_inspector_on
from compensation.models import BulkReplay, DeadLetter, WorkOrder
from compensation.selectors import sla_of
from compensation.services.escalation import CLOCKS
from retryops.errors import DomainError
from scheduling.admin import ReadOnlyAdmin


def _run(modeladmin, request, queryset, verb: str, call) -> None:
    """Call one service per selected row; report how many did and why the others did not."""
    done, refused = 0, []
    for pk in queryset.values_list("pk", flat=True):
        try:
            call(pk, request.user.get_username())
            done += 1
        except DomainError as exc:
            refused.append(f"#{pk}: {exc}")
    if done:
        modeladmin.message_user(request, f"{verb} {done}", messages.SUCCESS)
    if refused:
        shown = "; ".join(refused[:5]) + (f"; and {len(refused) - 5} more" if len(refused) > 5 else "")
        modeladmin.message_user(request, f"{len(refused)} refused: {shown}", messages.ERROR)


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
class DeadLetterAdmin(DlqInspectorPage, ReadOnlyAdmin):
    """Every field is the services'; the actions change them, and the clean-up purges them."""

    list_display = ("id", "state", "flow", "resource", "short_signature", "attempt_count", "died_at", "work_order",
                    "replay_task")
    list_filter = ("state", "flow", "error_category", "pool")
    list_select_related = ("resource", "work_order")
    search_fields = ("=id", "=task__id", "error_signature", "resource__key")
    show_full_result_count = False
    readonly_fields = [f.name for f in DeadLetter._meta.fields]
    actions = ["replay", "replay_on_any_resource", "discard", "resolve", bulk_replay_like_these]

    @admin.display(description="error signature")
    def short_signature(self, letter):
        return truncatechars(letter.error_signature, 80)

    @admin.action(description="Replay on the same resource", permissions=["view"])
    def replay(self, request, queryset):
        _run(self, request, queryset, "replaying",
             lambda pk, actor: services.replay_dead_letter(dead_letter=pk, actor=actor))

    @admin.action(description="Replay on any resource of the pool", permissions=["view"])
    def replay_on_any_resource(self, request, queryset):
        _run(self, request, queryset, "replaying",
             lambda pk, actor: services.replay_dead_letter(dead_letter=pk, actor=actor, any_resource=True))

    @admin.action(description="Discard", permissions=["view"])
    def discard(self, request, queryset):
        _run(self, request, queryset, "discarded",
             lambda pk, actor: services.discard_dead_letter(dead_letter=pk, actor=actor, reason="admin"))

    @admin.action(description="Mark resolved", permissions=["view"])
    def resolve(self, request, queryset):
        _run(self, request, queryset, "resolved",
             lambda pk, actor: services.resolve_dead_letter(dead_letter=pk, actor=actor, reason="admin"))


class WorkOrderForm(forms.ModelForm):
    """What an operator types on a work order; the state and the clocks are the services'."""

    class Meta:
        model = WorkOrder
        fields = ["title", "flow", "pool", "assignee", "runbook", "notes", "resolution"]


@admin.register(WorkOrder)
class WorkOrderAdmin(RunbooksOnWorkOrder, admin.ModelAdmin):
    form = WorkOrderForm
    list_display = ("id", "title", "state", "sla", "dead_letter_count", "assignee", "first_dead_at", "created_at",
                    "acknowledged_at", "compensated_at")
    list_filter = ("state", "source", "flow")
    list_select_related = ("pool",)
    search_fields = ("=id", "title", "error_signature", "assignee")
    show_full_result_count = False
    actions = ["acknowledge", "start", "compensate", "close", "cancel"]
    _OWNED = ("state", "source", "error_signature", "opened_by", "dead_letter_count", "first_dead_at",
              "last_dead_at", "created_at", "acknowledged_at", "started_at", "compensated_at", "ended_at",
              "notice_breached_at", "acknowledge_breached_at", "compensate_breached_at", "updated_at", "sla")

    def get_readonly_fields(self, request, obj=None):
        if obj is None:
            return ()
        panels = ("runbooks_panel", "runbook_runs_panel")  # RunbooksOnWorkOrder's
        if obj.state in WORK_ORDER_LIVE:
            return ("title", "flow", "pool", *self._OWNED, *panels)
        return ("title", "flow", "pool", "assignee", "runbook", "notes", "resolution", *self._OWNED, *panels)

    def get_fields(self, request, obj=None):
        if obj is None:
            return ["title", "flow", "pool", "assignee", "runbook", "notes"]
        return ["title", "flow", "pool", "assignee", "runbook", "notes", "resolution", *self._OWNED,
                "runbooks_panel", "runbook_runs_panel"]

    def has_delete_permission(self, request, obj=None):
        return False

    @admin.display(description="SLA")
    def sla(self, order):
        """The clocks past their limit now (selectors.sla_of) and those escalate marked, with when
        each ran out: a marked breach stays shown after the work order moved on."""
        marked = {clock: at for clock in CLOCKS if (at := getattr(order, f"{clock}_breached_at")) is not None}
        clocks = list(dict.fromkeys([*marked, *sla_of(order).breached]))
        if not clocks:
            return format_html('<span style="color:{}">{}</span>', "#447e36", "ok")
        since = {clock: f" (since {date_format(timezone.localtime(at), 'SHORT_DATETIME_FORMAT')})"
                 for clock, at in marked.items()}
        return format_html('<span style="color:#ba2121">breached: {}</span>',
                           format_html_join(", ", "{}{}", ((clock, since.get(clock, "")) for clock in clocks)))

    def save_model(self, request, obj, form, change):
        actor = request.user.get_username()
        data = form.cleaned_data
        if not change:
            created = services.open_work_order(title=data["title"], actor=actor, flow=data.get("flow") or "",
                                               pool=data.get("pool"), runbook=data.get("runbook") or "",
                                               notes=data.get("notes") or "", assignee=data.get("assignee") or "")
            obj.pk = created.pk
            return
        edited = {f: data[f] for f in ("assignee", "runbook", "notes", "resolution") if f in form.changed_data}
        if edited:
            services.change_work_order(work_order=obj.pk, actor=actor, **edited)

    def save_related(self, request, form, formsets, change):
        pass  # nothing related is edited here

    @admin.action(description="Acknowledge", permissions=["change"])
    def acknowledge(self, request, queryset):
        _run(self, request, queryset, "acknowledged",
             lambda pk, actor: services.acknowledge_work_order(work_order=pk, actor=actor))

    @admin.action(description="Start compensation", permissions=["change"])
    def start(self, request, queryset):
        _run(self, request, queryset, "started",
             lambda pk, actor: services.start_work_order(work_order=pk, actor=actor))

    @admin.action(description="Mark compensated (with the resolution typed on the work order)",
                  permissions=["change"])
    def compensate(self, request, queryset):
        resolutions = dict(queryset.values_list("pk", "resolution"))
        _run(self, request, queryset, "compensated",
             lambda pk, actor: services.compensate_work_order(work_order=pk, actor=actor,
                                                              resolution=resolutions.get(pk, "")))

    @admin.action(description="Close", permissions=["change"])
    def close(self, request, queryset):
        resolutions = dict(queryset.values_list("pk", "resolution"))
        _run(self, request, queryset, "closed",
             lambda pk, actor: services.close_work_order(work_order=pk, actor=actor,
                                                         resolution=resolutions.get(pk, "")))

    @admin.action(description="Cancel (opened by mistake)", permissions=["change"])
    def cancel(self, request, queryset):
        _run(self, request, queryset, "cancelled",
             lambda pk, actor: services.cancel_work_order(work_order=pk, actor=actor,
                                                          reason=f"cancelled in the admin by {actor}"))


@admin.register(BulkReplay)
class BulkReplayAdmin(DlqInspectorPage, BulkReplayConsole, ReadOnlyAdmin):
    list_display = ("id", "state", "filter", "rate", "selected", "done", "refused", "requested_by", "created_at",
                    "heartbeat_at", "finished_at")
    list_filter = ("state",)
    readonly_fields = [f.name for f in BulkReplay._meta.fields]

from compensation import admin_notifications  # noqa: E402, F401  (the notifications admin: its own module)
