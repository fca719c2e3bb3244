"""Bulk replay in the admin: a page to choose dead letters by filter, count them (the dry run),
then start the replay; a cancel button and action; the progress on a bulk replay's page; and a
dead-letter action that opens the page with the selected rows' common flow and signature.
Everything goes through compensation.services.bulk_replay; no form writes a bulk replay's columns."""

import hashlib
import json
import math
from urllib.parse import urlencode

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.widgets import AdminSplitDateTime
from django.core.exceptions import PermissionDenied
from django.http import HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html
from django.utils.text import format_lazy
from django.utils.translation import gettext, ngettext
from django.utils.translation import gettext_lazy as _
from django.views.decorators.http import require_POST

from compensation.admin_console import run_each, span
from compensation.choices import BulkReplayState
from compensation.errors import BulkReplayRunning
from compensation.forms import ConsoleForm
from compensation.models import BulkReplay
from compensation.services.bulk_replay import (
    DEFAULT_RATE,
    FILTER_FIELDS,
    MAX_RATE,
    MIN_RATE,
    bulk_replay_preview,
    cancel_bulk_replay,
    start_bulk_replay,
)
from resources.models import ResourcePool
from retryops import flags
from retryops.errors import DomainError

STATE_COLOURS = {BulkReplayState.RUNNING: "#205493", BulkReplayState.FINISHED: "#2e7d32",
                 BulkReplayState.CANCELLED: "#666"}
# The dead-letter columns "bulk replay like these" carries over when all selected rows share them.
LIKE_THESE = {"flow": "flow", "error_signature": "error_signature", "pool": "pool_id"}


class BulkReplayForm(ConsoleForm):
    """What the operator chooses. It only parses what was typed; the services judge it (a rate
    out of range, an unknown pool) and their errors are put on the field they name."""

    flow = forms.CharField(label=_("Flow"), required=False)
    error_signature = forms.CharField(label=_("Error signature"), required=False,
                                      widget=forms.TextInput(attrs={"size": 80}))
    pool = forms.ModelChoiceField(label=_("Pool"), queryset=ResourcePool.objects.order_by("name"), required=False,
                                  empty_label=_("any pool"))
    resource = forms.IntegerField(required=False, label=_("Resource id"))
    died_after = forms.SplitDateTimeField(label=_("Died after"), required=False, widget=AdminSplitDateTime,
                                          help_text=_("Dead letters that died at or after this time."))
    died_before = forms.SplitDateTimeField(label=_("Died before"), required=False, widget=AdminSplitDateTime,
                                           help_text=_("Dead letters that died before this time."))
    rate = forms.FloatField(label=_("Rate"), initial=DEFAULT_RATE,
                            widget=forms.NumberInput(attrs={"min": MIN_RATE, "max": MAX_RATE, "step": "any"}),
                            help_text=format_lazy(_("Replays per second, from {min} to {max}."), min=MIN_RATE,
                                                  max=MAX_RATE))
    any_resource = forms.BooleanField(required=False, label=_("On any resource of the pool"),
                                      help_text=_("Otherwise each dead letter is replayed on its own resource."))

    def filter(self) -> dict:
        data = self.cleaned_data
        chosen = {name: data.get(name) for name in FILTER_FIELDS}
        if chosen["pool"] is not None:
            chosen["pool"] = chosen["pool"].pk
        return {name: value for name, value in chosen.items() if value not in (None, "")}

    def fingerprint(self) -> str:
        """The filter the count on the page was made for: "start" is taken only for that one, so
        what starts is what the operator saw counted (the rate does not change the count)."""
        return hashlib.sha256(json.dumps(self.filter(), sort_keys=True, default=str).encode()).hexdigest()[:32]


@admin.action(description=_("Bulk replay like these (a filter with their common flow and signature)"),
              permissions=["view"])
def bulk_replay_like_these(modeladmin, request, queryset):
    """Open the bulk replay page with what the selected dead letters share; it counts before it starts."""
    initial = {}
    for name, column in LIKE_THESE.items():
        values = list(queryset.order_by().values_list(column, flat=True).distinct()[:2])
        if len(values) == 1 and values[0] not in (None, ""):
            initial[name] = values[0]
    return HttpResponseRedirect(bulk_replay_url(**initial))


def bulk_replay_url(**initial) -> str:
    """The bulk replay start page, filled in (it counts before it starts anything)."""
    return f"{reverse('admin:compensation_bulkreplay_add')}?{urlencode(initial)}"


class BulkReplayConsole:
    """Mixed into the bulk replay's ModelAdmin (read-only otherwise): "add" is the start page, not
    a model form; the change page shows the progress and a cancel button."""

    change_form_template = "admin/compensation/bulkreplay/change_form.html"
    start_template = "admin/compensation/bulkreplay/start.html"
    actions = ["cancel"]

    def has_add_permission(self, request):
        return admin.ModelAdmin.has_add_permission(self, request)

    def has_cancel_permission(self, request):
        return flags.enabled(flags.DLQ_INSPECTOR) and request.user.has_perm("compensation.change_bulkreplay")

    def get_fields(self, request, obj=None):
        return ["progress", *(f.name for f in BulkReplay._meta.fields)]

    def get_readonly_fields(self, request, obj=None):
        return self.get_fields(request, obj)

    @admin.display(description=_("progress"))
    def progress(self, bulk):
        handled = bulk.done + bulk.refused
        # Dead letters that die while it runs and match the filter are replayed too: `selected`
        # is the count at the start, not a cap.
        total = max(bulk.selected, handled)
        # Those that an operator (or another bulk replay) replayed, resolved or discarded first.
        left = total - handled
        gone = (ngettext("; the other %(count)d was no longer open when it reached them",
                         "; the other %(count)d were no longer open when it reached them", left) % {"count": left}
                if bulk.state == BulkReplayState.FINISHED and left else "")
        state = format_html('<b style="color:{}">{}</b>', STATE_COLOURS.get(bulk.state, "#000"),
                            bulk.get_state_display())
        said = format_html(gettext("{state}: {handled} of {total} handled &mdash; {done} replayed, {refused} "
                                   "refused{gone}; at most {rate} per second"), state=state, handled=handled,
                           total=total, done=bulk.done, refused=bulk.refused, gone=gone, rate=f"{bulk.rate:g}")
        return format_html('<progress value="{}" max="{}" style="width:14em"></progress> {}', handled, total or 1, said)

    def change_view(self, request, object_id, form_url="", extra_context=None):
        extra_context = {**(extra_context or {}), "can_cancel": self.has_cancel_permission(request)}
        return super().change_view(request, object_id, form_url, extra_context)

    def get_urls(self):
        cancel = self.admin_site.admin_view(require_POST(self.cancel_view))
        return [path("<int:bulk_replay_id>/cancel/", cancel, name="compensation_bulkreplay_cancel"),
                *super().get_urls()]

    def add_view(self, request, form_url="", extra_context=None):
        if not self.has_add_permission(request):
            raise PermissionDenied
        count = None
        if request.method != "POST":
            initial = {name: request.GET[name] for name in (*LIKE_THESE, "resource") if name in request.GET}
            form = BulkReplayForm(initial=initial)
        else:
            form = BulkReplayForm(request.POST)
            if form.is_valid():
                confirmed = "_start" in request.POST and request.POST.get("previewed") == form.fingerprint()
                if confirmed:
                    started = self._start(request, form)
                    if started is not None:
                        return HttpResponseRedirect(reverse("admin:compensation_bulkreplay_change",
                                                            args=[started.pk]))
                elif "_start" in request.POST:
                    self.message_user(request, gettext("The filter changed since the count: here is the new count; "
                                                       "start again to replay these."), messages.WARNING)
                count = self._count(form)
        context = {
            **self.admin_site.each_context(request),
            "title": gettext("Start a bulk replay"),
            "subtitle": None,
            "opts": self.model._meta,
            "adminform": helpers.AdminForm(form, [(None, {"fields": list(form.fields)})], {}),
            "form": form,
            "media": self.media + form.media,
            "count": count,
            "previewed": form.fingerprint() if count is not None else "",
            "estimate": span(math.ceil(count / form.cleaned_data["rate"]))
            if count and form.cleaned_data.get("rate", 0) > 0 else None,
            **(extra_context or {}),
        }
        return TemplateResponse(request, self.start_template, context)

    def _count(self, form: BulkReplayForm) -> int | None:
        try:
            return bulk_replay_preview(filter=form.filter())
        except DomainError as exc:
            form.add_refusal(exc)
            return None

    def _start(self, request, form: BulkReplayForm) -> BulkReplay | None:
        data = form.cleaned_data
        try:
            # The console starts only what its operator previewed (the count, on this page): an empty
            # filter there is a choice made with the number of dead letters in view.
            started = start_bulk_replay(filter=form.filter(), actor=request.user.get_username(), rate=data["rate"],
                                        any_resource=data["any_resource"], everything=True)
        except BulkReplayRunning as exc:
            running = exc.details.get("bulk_replay_id")
            if running is None:  # it finished between the refusal and the look-up
                form.add_error(None, str(exc))
            else:
                form.add_error(None, format_html(
                    gettext('Another bulk replay with this filter is running: <a href="{url}">bulk replay {id}</a>. '
                            "Cancel it or wait for it to finish."),
                    url=reverse("admin:compensation_bulkreplay_change", args=[running]), id=running))
            return None
        except DomainError as exc:
            form.add_refusal(exc)
            return None
        self.message_user(request, ngettext(
            "Started %(bulk)s: %(count)d open dead letter matched, at most %(rate)s replays per second.",
            "Started %(bulk)s: %(count)d open dead letters matched, at most %(rate)s replays per second.",
            started.selected) % {"bulk": started.display_name, "count": started.selected, "rate": f"{started.rate:g}"},
            messages.SUCCESS)
        return started

    def cancel_view(self, request, bulk_replay_id: int):
        if not self.has_cancel_permission(request):
            raise PermissionDenied
        bulk = get_object_or_404(BulkReplay, pk=bulk_replay_id)
        try:
            cancel_bulk_replay(bulk_replay=bulk.pk, actor=request.user.get_username())
        except DomainError as exc:
            self.message_user(request, str(exc), messages.ERROR)
        else:
            self.message_user(request, gettext("Cancelled %(bulk)s; the replays it started go on.") % {
                "bulk": bulk.display_name}, messages.SUCCESS)
        return HttpResponseRedirect(reverse("admin:compensation_bulkreplay_change", args=[bulk.pk]))

    @admin.action(description=_("Cancel (the replays they started go on)"), permissions=["cancel"])
    def cancel(self, request, queryset):
        run_each(self, request, queryset, lambda pk, actor: cancel_bulk_replay(bulk_replay=pk, actor=actor),
                 done=lambda cancelled: ngettext("Cancelled %(count)d bulk replay; the replays it started go on.",
                                                 "Cancelled %(count)d bulk replays; the replays they started go on.",
                                                 len(cancelled)) % {"count": len(cancelled)})
