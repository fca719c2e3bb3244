"""The runbooks in the admin: on a work order's page its suggested runbooks (steps rendered) and
its runs; a page per work order to request an action; approve, run and reject as admin actions.
Everything goes through compensation.services.runbooks; no form writes a run's columns.

The work order's ModelAdmin (compensation.admin) mixes in RunbooksOnWorkOrder and shows
RunbookRunInline."""

import json
import uuid

from django import forms
from django.contrib import admin, messages
from django.http import HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template import engines
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe

from compensation.models import WorkOrder
from compensation.runbook_models import RunbookRun, RunbookRunState
from compensation.runbooks import suggest_for_work_order
from compensation.services.runbooks import (
    approve_runbook_action,
    reject_runbook_action,
    request_runbook_action,
    run_runbook_action,
)
from retryops.errors import DomainError

STATE_COLOURS = {RunbookRunState.REQUESTED: "#b36b00", RunbookRunState.APPROVED: "#205493",
                 RunbookRunState.RUNNING: "#205493", RunbookRunState.SUCCEEDED: "#2e7d32",
                 RunbookRunState.FAILED: "#c62828", RunbookRunState.REJECTED: "#666"}


def state_badge(run: RunbookRun) -> str:
    return format_html('<b style="color:{}">{}</b>', STATE_COLOURS.get(run.state, "#000"), run.get_state_display())


class RunbookRequestForm(forms.Form):
    """Which action, with what input; the token is made when the page renders, so a double
    submit of the same page is the same run."""

    runbook = forms.CharField(widget=forms.HiddenInput)
    action = forms.CharField(widget=forms.HiddenInput)
    token = forms.CharField(widget=forms.HiddenInput)
    input = forms.CharField(widget=forms.Textarea(attrs={"rows": 3, "cols": 60}), initial="{}")

    def clean_input(self):
        try:
            return json.loads(self.cleaned_data["input"])
        except ValueError as exc:
            raise forms.ValidationError(f"not JSON: {exc}") from None


def _actor(request) -> str:
    return request.user.get_username()


def _report(modeladmin, request, call, done: str) -> bool:
    try:
        call()
    except DomainError as exc:
        modeladmin.message_user(request, f"{exc} [{exc.code}]", messages.ERROR)
        return False
    modeladmin.message_user(request, done, messages.SUCCESS)
    return True


PAGE = engines["django"].from_string("""{% extends "admin/base_site.html" %}
{% block content %}<div id="content-main">
<p>{{ order.title }} &mdash; {{ order.get_state_display }}; flow {{ order.flow|default:"any" }},
signature <code>{{ order.error_signature|default:"none" }}</code>.</p>
{% for book in books %}<h2>{{ book.title }} <small>({{ book.name }})</small></h2>
<div class="runbook-steps">{{ book.html }}</div>
{% for action in book.forms %}<form method="post" style="margin:1em 0">{% csrf_token %}
<h3>{{ action.name }}{% if action.external %} &mdash; external: another operator must approve it{% endif %}</h3>
<p>{{ action.description }}</p><p>input (JSON): <code>{{ action.schema }}</code></p>
{{ action.form.as_p }}<input type="submit" value="{% if action.external %}Request approval{% else %}Request{% endif %}">
</form>{% endfor %}{% empty %}<p>No runbook applies to this work order.</p>{% endfor %}
</div>{% endblock %}""")


class RunbooksOnWorkOrder:
    """Mixed into the work order's ModelAdmin: the suggested runbooks, the runs, and the page
    to request an action."""

    @admin.display(description="Suggested runbooks")
    def runbooks_panel(self, order):
        if order is None or order.pk is None:
            return "-"
        books = suggest_for_work_order(order)
        link = reverse("admin:compensation_workorder_runbooks", args=[order.pk])
        items = format_html_join("", "<details><summary><b>{}</b> ({})</summary>{}</details>",
                                 ((b.title, b.name, mark_safe(b.steps_html())) for b in books))
        return format_html('{}<p><a href="{}">Request a runbook action&hellip;</a></p>',
                           items or "No runbook applies.", link)

    @admin.display(description="Runbook runs")
    def runbook_runs_panel(self, order):
        if order is None or order.pk is None:
            return "-"
        runs = order.runbook_runs.order_by("-id")[:50]
        rows = format_html_join("", '<li><a href="{}">{}</a>: {} / {} {} &mdash; asked by {}{}</li>', (
            (reverse("admin:compensation_runbookrun_change", args=[run.pk]), run, run.runbook, run.action,
             state_badge(run), run.requested_by, f", approved by {run.approved_by}" if run.approved_by else "")
            for run in runs))
        return format_html("<ul>{}</ul>", rows) if runs else "None yet."

    def get_urls(self):
        view = self.admin_site.admin_view(self.runbooks_view)
        return [path("<int:work_order_id>/runbooks/", view, name="compensation_workorder_runbooks"),
                *super().get_urls()]

    def runbooks_view(self, request, work_order_id: int):
        order = get_object_or_404(WorkOrder, pk=work_order_id)
        if request.method == "POST":
            form = RunbookRequestForm(request.POST)
            if form.is_valid():
                data = form.cleaned_data
                if _report(self, request, lambda: request_runbook_action(
                        work_order=order, runbook=data["runbook"], action=data["action"], input=data["input"],
                        token=data["token"], actor=_actor(request)),
                        f"requested {data['runbook']} / {data['action']}; approve or run it from its run's page"):
                    return HttpResponseRedirect(reverse("admin:compensation_workorder_change", args=[order.pk]))
            else:
                self.message_user(request, f"not requested: {form.errors.as_text()}", messages.ERROR)
        books = [{"title": b.title, "name": b.name, "html": mark_safe(b.steps_html()), "forms": [
            {"name": a.name, "external": a.external, "description": a.description,
             "schema": json.dumps(a.input_schema, sort_keys=True),
             "form": RunbookRequestForm(initial={"runbook": b.name, "action": a.name, "token": uuid.uuid4().hex})}
            for a in b.actions]} for b in suggest_for_work_order(order)]
        context = {**self.admin_site.each_context(request), "title": f"Runbooks for {order}", "order": order,
                   "books": books, "opts": self.model._meta}
        return TemplateResponse(request, PAGE, context)


class RunbookRunInline(admin.TabularInline):
    model = RunbookRun
    fields = ("runbook", "action", "state", "requested_by", "approved_by", "run_by", "finished_at")
    readonly_fields = fields
    extra = 0
    show_change_link = True
    can_delete = False

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(RunbookRun)
class RunbookRunAdmin(admin.ModelAdmin):
    """Runs are read-only; their transitions are the actions below, each through its service."""

    list_display = ("id", "work_order", "runbook", "action", "external", "badge", "requested_by", "approved_by",
                    "run_by", "requested_at")
    list_filter = ("state", "external", "runbook")
    list_select_related = ("work_order",)
    search_fields = ("token", "runbook", "action", "requested_by")
    readonly_fields = [f.name for f in RunbookRun._meta.fields]
    actions = ["approve", "run", "reject"]
    show_full_result_count = False

    @admin.display(description="state", ordering="state")
    def badge(self, run):
        return state_badge(run)

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False  # view only: a save would write back the whole row

    def has_delete_permission(self, request, obj=None):
        return False

    def _each(self, request, queryset, call, verb):
        done = sum(_report(self, request, lambda run=run: call(run), f"{verb} {run}") for run in queryset)
        if done != queryset.count():
            self.message_user(request, f"{verb} {done} of {queryset.count()}", messages.WARNING)

    @admin.action(description="Approve (another operator's request)")
    def approve(self, request, queryset):
        self._each(request, queryset, lambda run: approve_runbook_action(run=run.pk, actor=_actor(request)),
                   "approved")

    @admin.action(description="Run now")
    def run(self, request, queryset):
        self._each(request, queryset, lambda run: run_runbook_action(run=run.pk, actor=_actor(request)), "ran")

    @admin.action(description="Reject (or withdraw)")
    def reject(self, request, queryset):
        self._each(request, queryset, lambda run: reject_runbook_action(
            run=run.pk, actor=_actor(request), reason=f"rejected in the admin by {_actor(request)}"), "rejected")
