"""The runbooks in the admin: on a work order's page its suggested runbooks (steps rendered) and
its runs with their approve, run and reject buttons; a page per work order to request an action;
approve, run and reject as admin actions too. Everything goes through compensation.runbooks.services;
no form writes a run's columns.

Permissions, checked by every view and action: compensation.run_runbook_action to request and run
an action, compensation.approve_runbookrun to approve one; rejecting takes either (an approver
turns a request down, an operator withdraws one). That the requester of an external action cannot
approve it (four eyes) is the service's rule, and the database's."""

import json
import uuid

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _
from django.views.decorators.http import require_POST

from compensation.admin_console import ShownAs, work_order_shown
from compensation.forms import ReasonForm
from compensation.runbooks.catalog import suggest_for_work_order
from compensation.runbooks.models import RunbookRun, RunbookRunState
from compensation.runbooks.services import (
    approve_runbook_action,
    reject_runbook_action,
    request_runbook_action,
    run_runbook_action,
)
from compensation.work_orders.models import WorkOrder
from resources.admin import masked_json_display
from retryops.errors import DomainError

STATE_COLOURS = {RunbookRunState.REQUESTED: "#b36b00", RunbookRunState.APPROVED: "#205493",
                 RunbookRunState.RUNNING: "#205493", RunbookRunState.SUCCEEDED: "#2e7d32",
                 RunbookRunState.FAILED: "#c62828", RunbookRunState.REJECTED: "#666"}
RUN_PERMISSION = "compensation.run_runbook_action"
APPROVE_PERMISSION = "compensation.approve_runbookrun"


def state_badge(run: RunbookRun) -> str:
    return format_html('<b style="color:{}">{}</b>', STATE_COLOURS.get(run.state, "#000"), run.get_state_display())


def can_run(request) -> bool:
    return request.user.has_perm(RUN_PERMISSION)


def can_approve(request) -> bool:
    return request.user.has_perm(APPROVE_PERMISSION)


def can_reject(request) -> bool:
    return can_run(request) or can_approve(request)


def run_buttons(request, run: RunbookRun) -> dict:
    """What the user may do to a run from a work order's page: each button's URL, empty when not
    offered. The service judges again on submit (its state, four eyes)."""
    def url(verb):
        return reverse(f"admin:compensation_runbookrun_{verb}", args=[run.pk])

    waiting = run.state == RunbookRunState.REQUESTED
    # The service's four-eyes rule: the user behind the request, also through an API client.
    mine = run.requester_identity.casefold() == request.user.get_username().casefold()
    return {
        "approve_url": url("approve") if waiting and not mine and can_approve(request) else "",
        # The requester is told why there is no approve button for them.
        "needs_other_approver": waiting and mine,
        "run_url": url("run") if run.state == RunbookRunState.APPROVED and can_run(request) else "",
        "reject_url": url("reject") if run.state in (RunbookRunState.REQUESTED, RunbookRunState.APPROVED)
        and can_reject(request) else "",
    }


class RunbookRequestForm(forms.Form):
    """Which action, with what input; the token is made when the page renders, so a double
    submit of the same page is the same run."""

    runbook = forms.CharField(widget=forms.HiddenInput)
    action = forms.CharField(widget=forms.HiddenInput)
    token = forms.CharField(widget=forms.HiddenInput)
    input = forms.CharField(label=_("Input"), widget=forms.Textarea(attrs={"rows": 3, "cols": 60}), initial="{}")

    def clean_input(self):
        try:
            return json.loads(self.cleaned_data["input"])
        except (ValueError, RecursionError) as exc:  # RecursionError: nested past Python's limit
            raise forms.ValidationError(gettext("not JSON: %(error)s") % {"error": exc}) from None


def _actor(request) -> str:
    return request.user.get_username()


def _report(modeladmin, request, call, done: str) -> bool:
    try:
        result = call()
    except DomainError as exc:
        modeladmin.message_user(request, f"{exc} [{exc.code}]", messages.ERROR)
        return False
    # An action's own failure is its outcome, not a refusal: said as such, never as done.
    if isinstance(result, RunbookRun) and result.state == RunbookRunState.FAILED:
        modeladmin.message_user(request, gettext("%(run)s ran and failed: %(error)s") % {
            "run": result.display_name, "error": result.error}, messages.ERROR)
        return False
    modeladmin.message_user(request, done, messages.SUCCESS)
    return True


class RunbooksOnWorkOrder:
    """Mixed into the work order's ModelAdmin: the suggested runbooks and the page to request an action."""

    @admin.display(description=_("Suggested runbooks"))
    def runbooks_panel(self, order):
        if order is None or order.pk is None:
            return "-"
        books = suggest_for_work_order(order)
        link = reverse("admin:compensation_workorder_runbooks", args=[order.pk])
        # The runbook the work order follows is open; the other suggestions are folded.
        items = format_html_join("", "<details{}><summary><b>{}</b> ({})</summary>{}</details>",
                                 ((mark_safe(" open") if b.name == order.runbook else "", b.title, b.name,
                                   mark_safe(b.steps_html())) for b in books))
        return format_html('{}<p><a href="{}">{}</a></p>', items or gettext("No runbook applies."), link,
                           gettext("Request a runbook action…"))

    def get_urls(self):
        view = self.admin_site.admin_view(self.runbooks_view)
        return [path("<int:work_order_id>/runbooks/", view, name="compensation_workorder_runbooks"),
                *super().get_urls()]

    def runbooks_view(self, request, work_order_id: int):
        order = get_object_or_404(WorkOrder, pk=work_order_id)
        if not self.has_view_permission(request, order):
            raise PermissionDenied
        may_request = can_run(request)
        if request.method == "POST":
            if not may_request:
                raise PermissionDenied
            form = RunbookRequestForm(request.POST)
            if form.is_valid():
                data = form.cleaned_data
                if _report(self, request, lambda: request_runbook_action(
                        work_order=order, runbook=data["runbook"], action=data["action"], input=data["input"],
                        token=data["token"], actor=_actor(request))[0],
                        gettext("requested %(runbook)s / %(action)s; approve or run it from the work order's page")
                        % {"runbook": data["runbook"], "action": data["action"]}):
                    return HttpResponseRedirect(reverse("admin:compensation_workorder_change", args=[order.pk]))
            else:
                self.message_user(request, gettext("not requested: %(errors)s") % {"errors": form.errors.as_text()},
                                  messages.ERROR)
        books = [{"title": b.title, "name": b.name, "html": mark_safe(b.steps_html()), "forms": [
            {"name": a.name, "external": a.external, "description": a.description,
             "schema": json.dumps(a.input_schema, sort_keys=True),
             "form": RunbookRequestForm(initial={"runbook": b.name, "action": a.name, "token": uuid.uuid4().hex})}
            for a in b.actions]} for b in suggest_for_work_order(order)]
        context = {**self.admin_site.each_context(request),
                   "title": gettext("Runbooks for %(order)s") % {"order": order.display_name}, "order": order,
                   "books": books, "opts": self.model._meta, "may_request": may_request}
        return TemplateResponse(request, "admin/compensation/workorder/runbooks.html", context)


@admin.register(RunbookRun)
class RunbookRunAdmin(ShownAs, admin.ModelAdmin):
    """Runs are read-only; their transitions are the actions and buttons below, each through its service."""

    list_display = ("id", work_order_shown, "runbook", "action", "external", "badge", "requested_by", "approved_by",
                    "run_by", "requested_at")
    list_filter = ("state", "external", "runbook")
    list_select_related = ("work_order",)
    search_fields = ("token", "runbook", "action", "requested_by")
    SHOWN_AS = {"work_order": "work_order_link", "input": "input_shown", "result": "result_shown"}
    readonly_fields = [*(f.name for f in RunbookRun._meta.fields), *SHOWN_AS.values()]
    actions = ["approve", "run", "reject"]
    show_full_result_count = False

    input_shown = masked_json_display("input", description=RunbookRun._meta.get_field("input").verbose_name)
    result_shown = masked_json_display("result", description=RunbookRun._meta.get_field("result").verbose_name)

    @admin.display(description=_("state"), ordering="state")
    def badge(self, run):
        return state_badge(run)

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False  # view only: a save would write back the whole row

    def has_delete_permission(self, request, obj=None):
        return False

    def has_approve_permission(self, request, obj=None):
        return can_approve(request)

    def has_run_permission(self, request, obj=None):
        return can_run(request)

    def has_reject_permission(self, request, obj=None):
        return can_reject(request)

    def _each(self, request, queryset, call, verb):
        done = sum(_report(self, request, lambda run=run: call(run),
                           gettext("%(verb)s %(run)s") % {"verb": verb, "run": run.display_name}) for run in queryset)
        if done != queryset.count():
            self.message_user(request, gettext("%(verb)s %(done)d of %(count)d") % {
                "verb": verb, "done": done, "count": queryset.count()}, messages.WARNING)

    @admin.action(description=_("Approve (another operator's request)"), permissions=["approve"])
    def approve(self, request, queryset):
        self._each(request, queryset, lambda run: approve_runbook_action(run=run.pk, actor=_actor(request)),
                   gettext("approved"))

    @admin.action(description=_("Run now"), permissions=["run"])
    def run(self, request, queryset):
        self._each(request, queryset, lambda run: run_runbook_action(run=run.pk, actor=_actor(request)),
                   gettext("ran"))

    @admin.action(description=_("Reject (or withdraw)"), permissions=["reject"])
    def reject(self, request, queryset):
        # Kept on the run and in its audit entry: in English, like all stored text.
        reason = f"rejected in the admin by {_actor(request)}"
        self._each(request, queryset, lambda run: reject_runbook_action(run=run.pk, actor=_actor(request),
                                                                        reason=reason), gettext("rejected"))

    # the buttons of a work order's page: back on that page

    def get_urls(self):
        wrap = self.admin_site.admin_view
        return [
            path("<int:run_id>/approve/", wrap(require_POST(self.approve_view)), name="compensation_runbookrun_approve"),
            path("<int:run_id>/run/", wrap(require_POST(self.run_view)), name="compensation_runbookrun_run"),
            path("<int:run_id>/reject/", wrap(self.reject_view), name="compensation_runbookrun_reject"),
            *super().get_urls(),
        ]

    def _back(self, run: RunbookRun):
        return HttpResponseRedirect(reverse("admin:compensation_workorder_change", args=[run.work_order_id]))

    def approve_view(self, request, run_id: int):
        if not self.has_approve_permission(request):
            raise PermissionDenied
        run = get_object_or_404(RunbookRun, pk=run_id)
        _report(self, request, lambda: approve_runbook_action(run=run.pk, actor=_actor(request)),
                gettext("approved %(run)s") % {"run": run.display_name})
        return self._back(run)

    def run_view(self, request, run_id: int):
        if not self.has_run_permission(request):
            raise PermissionDenied
        run = get_object_or_404(RunbookRun, pk=run_id)
        _report(self, request, lambda: run_runbook_action(run=run.pk, actor=_actor(request)),
                gettext("%(run)s ran and succeeded.") % {"run": run.display_name})
        return self._back(run)

    def reject_view(self, request, run_id: int):
        if not self.has_reject_permission(request):
            raise PermissionDenied
        run = get_object_or_404(RunbookRun, pk=run_id)
        form = ReasonForm(request.POST if request.method == "POST" else None)
        if request.method == "POST" and form.is_valid():
            try:
                reject_runbook_action(run=run.pk, actor=_actor(request), reason=form.cleaned_data["reason"])
            except DomainError as exc:
                form.add_refusal(exc)
            else:
                self.message_user(request, gettext("rejected %(run)s") % {"run": run.display_name}, messages.SUCCESS)
                return self._back(run)
        context = {**self.admin_site.each_context(request), "opts": self.model._meta, "run": run, "form": form,
                   "title": gettext("Reject %(run)s") % {"run": run.display_name}, "confirm": gettext("Yes, reject it"),
                   "question": gettext("Reject %(run)s (%(runbook)s / %(action)s, requested by %(who)s)? It will "
                                       "never run.") % {"run": run.display_name, "runbook": run.runbook,
                                                        "action": run.action, "who": run.requested_by},
                   "back_url": reverse("admin:compensation_workorder_change", args=[run.work_order_id])}
        return TemplateResponse(request, "admin/compensation/runbookrun/reject.html", context)
