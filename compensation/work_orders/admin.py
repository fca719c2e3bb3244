"""A work order's page in the console: what an operator needs to act on it on one page.
Above the form, its transition buttons, its three SLA clocks, its dead letters and its runbook
runs with their approval (four eyes) and buttons; in the form, what an operator types (assignee,
runbook, notes, resolution) and the suggested runbooks; below it, what the on-call was told.

A transition (acknowledge, start, compensate, close, cancel) asks for confirmation, with the text
it takes, and calls its service; it needs the work order's change permission, checked by the view
itself. An illegal transition is refused by the service, whose sentence the operator sees."""

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.formats import date_format
from django.utils.html import format_html
from django.utils.translation import gettext, ngettext_lazy
from django.utils.translation import gettext_lazy as _

from compensation.admin_console import audit_url, run_each, span
from compensation.admin_bulk_replay import bulk_replay_url
from compensation.admin_dead_letters import changelist_url
from compensation.choices import WORK_ORDER_LIVE, DeadLetterState
from compensation.forms import WorkOrderTransitionForm
from compensation.runbooks.admin import RunbooksOnWorkOrder, run_buttons
from compensation.selectors import (
    SlaClock,
    breached_clocks,
    dead_letter_states_of,
    notifications_of,
    runbook_runs_of,
    sla_clocks,
)
from compensation.work_orders import services
from compensation.work_orders.admin_filters import (
    CompensatedAtFilter,
    CompensateDueFilter,
    CompletedInTimeFilter,
    FirstDeadFilter,
    PagedFilter,
)
from compensation.work_orders.models import SLA_CLOCK_NAMES, SLA_CLOCKS, WorkOrder
from compensation.work_orders.services import TRANSITIONS
from resources.admin import EditsWhatThePageShowed
from retryops.errors import DomainError
from retryops.masking import mask_secrets

# How many of its notifications and runbook runs a work order's page shows; their lists have the rest.
NOTIFICATIONS_SHOWN = 20
RUNS_SHOWN = 50

# Each transition: its button, the question of its confirmation page, and the service it calls
# with the text it takes besides the operator.
TRANSITION_PAGES = {
    "acknowledge": {
        "label": _("Acknowledge"),
        "question": _("Acknowledge %(order)s? Its acknowledge clock stops; if nobody has it, it is yours."),
        "call": services.acknowledge_work_order,
        "takes": (),
    },
    "start": {
        "label": _("Start compensation"),
        "question": _("Start compensating %(order)s? It acknowledges it too if nobody has."),
        "call": services.start_work_order,
        "takes": (),
    },
    "compensate": {
        "label": _("Mark compensated"),
        "question": _("Mark %(order)s compensated? Its open dead letters are resolved and the on-call's page is "
                      "closed."),
        "call": services.compensate_work_order,
        "takes": ("resolution",),
    },
    "close": {
        "label": _("Close"),
        "question": _("Close %(order)s without compensation? Its open dead letters are resolved and the on-call's "
                      "page is closed."),
        "call": services.close_work_order,
        "takes": ("resolution",),
    },
    "cancel": {
        "label": _("Cancel"),
        "question": _("Cancel %(order)s, opened by mistake? Its dead letters stay open for another work order."),
        "call": services.cancel_work_order,
        "takes": ("reason",),
    },
}

CLOCK_NAMES = {
    "notice": _("Notice: dead letter → opened"),
    "acknowledge": _("Acknowledge: dead letter → acknowledged"),
    "compensate": _("Compensate: dead letter → compensated"),
}


def clock_row(clock: SlaClock) -> dict:
    """One SLA clock as the page shows it: what it measures, how long, the limit, and its state."""
    breached = clock.breached or clock.marked_at is not None
    if clock.seconds is None:
        status, tone = gettext("not run: the work order ended without this step"), "idle"
    elif clock.running and not breached:
        status, tone = gettext("running: %(left)s left") % {"left": span(clock.limit - clock.seconds)}, "running"
    elif clock.running:
        status, tone = gettext("breached, still running: %(over)s over") % {
            "over": span(clock.seconds - clock.limit)}, "breached"
    elif breached:
        status, tone = gettext("breached: %(over)s over") % {"over": span(clock.seconds - clock.limit)}, "breached"
    else:
        status, tone = gettext("met"), "met"
    return {"name": CLOCK_NAMES[clock.name], "started_at": clock.started_at, "stopped_at": clock.stopped_at,
            "running": clock.running, "elapsed": "" if clock.seconds is None else span(clock.seconds),
            "limit": span(clock.limit), "status": status, "tone": tone, "marked_at": clock.marked_at}


def dead_letters_summary(order: WorkOrder, *, can_bulk_replay: bool) -> dict:
    counts = dead_letter_states_of(order)
    rows = [{"label": label, "count": counts[state],
             "url": changelist_url(work_order__id__exact=order.pk, state__exact=state)}
            for state, label in DeadLetterState.choices if counts.get(state)]
    open_ones = counts.get(DeadLetterState.OPEN, 0)
    return {
        "total": sum(counts.values()), "states": rows, "url": changelist_url(work_order__id__exact=order.pk),
        # A bulk replay filters by flow and signature: offered when the work order is that group.
        "bulk_replay_url": bulk_replay_url(flow=order.flow, error_signature=order.error_signature)
        if can_bulk_replay and open_ones and order.flow and order.error_signature else "",
    }


class WorkOrderConsole:
    """Mixed into the work order's ModelAdmin: the transition pages and the page's panels."""

    change_form_template = "admin/compensation/workorder/change_form.html"

    def get_urls(self):
        view = self.admin_site.admin_view(self.transition_view)
        return [path("<int:work_order_id>/transition/<slug:action>/", view, name="compensation_workorder_transition"),
                *super().get_urls()]

    def transition_view(self, request, work_order_id: int, action: str):
        page = TRANSITION_PAGES.get(action)
        if page is None:
            raise Http404(gettext("no such transition: %(action)s") % {"action": action})
        order = get_object_or_404(WorkOrder, pk=work_order_id)
        if not self.has_change_permission(request, order):
            raise PermissionDenied
        back = reverse("admin:compensation_workorder_change", args=[order.pk])
        form = WorkOrderTransitionForm(request.POST if request.method == "POST" else None, takes=page["takes"],
                                       initial={"resolution": order.resolution})
        if request.method == "POST" and form.is_valid():
            try:
                moved = page["call"](work_order=order.pk, actor=request.user.get_username(), **form.cleaned_data)
            except DomainError as exc:
                if exc.details.get("field") in form.fields:
                    form.add_refusal(exc)  # the operator fixes what they typed on the same page
                else:
                    self.message_user(request, str(exc), messages.ERROR)
                    return HttpResponseRedirect(back)
            else:
                self.message_user(request, gettext("%(order)s is %(state)s.") % {
                    "order": moved.display_name, "state": moved.get_state_display().lower()}, messages.SUCCESS)
                return HttpResponseRedirect(back)
        context = {**self.admin_site.each_context(request), "opts": self.model._meta, "order": order, "form": form,
                   "title": gettext("%(verb)s: %(object)s") % {"verb": page["label"], "object": order.display_name},
                   "verb": page["label"], "confirm": page["label"], "back_url": back,
                   "question": page["question"] % {"order": order.display_name}}
        return TemplateResponse(request, "admin/compensation/workorder/transition.html", context)

    def transitions_for(self, request, order: WorkOrder) -> list[dict]:
        """The buttons of the transitions its state allows; the service decides again on submit."""
        if not self.has_change_permission(request, order):
            return []
        return [{"label": page["label"],
                 "url": reverse("admin:compensation_workorder_transition", args=[order.pk, action])}
                for action, page in TRANSITION_PAGES.items() if order.state in TRANSITIONS[action][0]]

    def render_change_form(self, request, context, add=False, change=False, form_url="", obj=None):
        if obj is not None and obj.pk is not None:
            runs = runbook_runs_of(obj, limit=RUNS_SHOWN)
            for run in runs:  # shown, never saved: what an action was given or answered may hold a secret
                run.input, run.result = mask_secrets(run.input), mask_secrets(run.result)
            notifications = notifications_of(obj, limit=NOTIFICATIONS_SHOWN)
            context.update(
                console=True,
                console_audit_url=audit_url(request, obj),
                console_transitions=self.transitions_for(request, obj),
                console_clocks=[clock_row(clock) for clock in sla_clocks(obj)],
                console_dead_letters=dead_letters_summary(
                    obj, can_bulk_replay=request.user.has_perm("compensation.add_bulkreplay")),
                console_runs=[{"run": run, **run_buttons(request, run)} for run in runs],
                console_runs_more=len(runs) == RUNS_SHOWN,
                console_runs_url=f"{reverse('admin:compensation_runbookrun_changelist')}"
                                 f"?work_order__id__exact={obj.pk}",
                console_notifications=notifications,
                console_notifications_more=len(notifications) == NOTIFICATIONS_SHOWN,
                console_notifications_url=f"{reverse('admin:compensation_notification_changelist')}"
                                          f"?subject_type__exact=work_order&subject_id={obj.pk}",
            )
        return super().render_change_form(request, context, add=add, change=change, form_url=form_url, obj=obj)


def _list_action(transition: str, description, done):
    """A transition as a list action: its service on each selected work order, with the resolution
    typed on each (compensate, close) or a reason naming who cancelled."""
    call, takes = TRANSITION_PAGES[transition]["call"], TRANSITION_PAGES[transition]["takes"]

    def action(modeladmin, request, queryset):
        resolutions = dict(queryset.values_list("pk", "resolution"))

        def one(pk, actor):
            # The reason is kept (audit entry, resolution): in English, like all stored text.
            texts = {"resolution": resolutions.get(pk, ""), "reason": f"cancelled in the admin by {actor}"}
            return call(work_order=pk, actor=actor, **{name: texts[name] for name in takes})

        run_each(modeladmin, request, queryset, one, done=lambda changed: done % {"count": len(changed)})

    action.__name__ = transition
    return admin.action(description=description, permissions=["change"])(action)


LIST_ACTIONS = [
    _list_action("acknowledge", _("Acknowledge"), ngettext_lazy(
        "Acknowledged %(count)d work order.", "Acknowledged %(count)d work orders.", "count")),
    _list_action("start", _("Start compensation"), ngettext_lazy(
        "Started compensating %(count)d work order.", "Started compensating %(count)d work orders.", "count")),
    _list_action("compensate", _("Mark compensated (with the resolution typed on the work order)"), ngettext_lazy(
        "Marked %(count)d work order compensated.", "Marked %(count)d work orders compensated.", "count")),
    _list_action("close", _("Close"), ngettext_lazy(
        "Closed %(count)d work order.", "Closed %(count)d work orders.", "count")),
    _list_action("cancel", _("Cancel (opened by mistake)"), ngettext_lazy(
        "Cancelled %(count)d work order.", "Cancelled %(count)d work orders.", "count")),
]


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
    actions = LIST_ACTIONS
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
        """The clocks past their limit now (selectors.sla_clocks) and those escalate marked, with when
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
