"""The dead-letter queue in the console: the open dead letters grouped by flow and error
signature, the first page an operator opens; replay, discard and resolve from the list and from a
dead letter's own page, discard and resolve only with a reason given on a confirmation page.

Every view and action checks its permission on the server (compensation.replay_deadletter,
compensation.discard_deadletter, which covers resolve too; the view permission for the groups);
every write is one service call, and a refusal is the service's own sentence."""

from urllib.parse import urlencode

from django.contrib import admin, messages
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.core.exceptions import PermissionDenied
from django.http import HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.translation import gettext, ngettext_lazy
from django.utils.translation import gettext_lazy as _

from compensation.admin_bulk_replay import bulk_replay_like_these, bulk_replay_url
from compensation.admin_console import audit_url, replays_started, run_each
from compensation.choices import DeadLetterState
from compensation.forms import ReasonForm, ReplayForm
from compensation.models import DeadLetter
from compensation.selectors import open_dead_letter_groups
from compensation.services.dead_letters import discard_dead_letter, resolve_dead_letter
from compensation.services.replay import replay_dead_letter
from retryops import flags
from retryops.errors import DomainError

# The groups page shows the biggest this many; signatures are normalised, so there are few.
GROUPS_SHOWN = 500
# A confirmation page lists this many of the selected dead letters and counts the rest.
LISTED = 50

# discard and resolve: the service, the words of the confirmation page and of the result.
SETTLE = {
    "discard": {
        "call": discard_dead_letter,
        "verb": _("Discard"),
        "question": ngettext_lazy(
            "Discard this dead letter? Nothing replays it; it is kept until the clean-up purges it.",
            "Discard these %(count)d dead letters? Nothing replays them; they are kept until the clean-up purges "
            "them.", "count"),
        "confirm": ngettext_lazy("Yes, discard it", "Yes, discard them", "count"),
        "done": ngettext_lazy("Discarded %(count)d dead letter.", "Discarded %(count)d dead letters.", "count"),
        "done_one": _("Discarded %(letter)s."),
    },
    "resolve": {
        "call": resolve_dead_letter,
        "verb": _("Mark resolved"),
        "question": ngettext_lazy(
            "Mark this dead letter resolved? Say how it was taken care of outside a replay.",
            "Mark these %(count)d dead letters resolved? Say how they were taken care of outside a replay.",
            "count"),
        "confirm": ngettext_lazy("Yes, mark it resolved", "Yes, mark them resolved", "count"),
        "done": ngettext_lazy("Marked %(count)d dead letter resolved.", "Marked %(count)d dead letters resolved.",
                              "count"),
        "done_one": _("Marked %(letter)s resolved."),
    },
}


def _has(request, codename: str) -> bool:
    return flags.enabled(flags.DLQ_INSPECTOR) and request.user.has_perm(f"compensation.{codename}")


def changelist_url(**lookups) -> str:
    return f"{reverse('admin:compensation_deadletter_changelist')}?{urlencode(lookups)}"


class DeadLetterConsole:
    """Mixed into the dead letter's ModelAdmin: the groups page, the actions and the buttons of a
    dead letter's page with their confirmation pages."""

    change_list_template = "admin/compensation/deadletter/change_list.html"
    change_form_template = "admin/compensation/deadletter/change_form.html"
    confirmation_template = "admin/compensation/deadletter/action_confirmation.html"
    actions = ["replay", "replay_on_any_resource", "discard", "resolve", bulk_replay_like_these]

    def has_replay_permission(self, request, obj=None) -> bool:
        return _has(request, "replay_deadletter")

    def has_discard_permission(self, request, obj=None) -> bool:
        return _has(request, "discard_deadletter")

    def _can_bulk_replay(self, request) -> bool:
        return _has(request, "add_bulkreplay")

    def get_urls(self):
        wrap = self.admin_site.admin_view
        return [
            path("groups/", wrap(self.groups_view), name="compensation_deadletter_groups"),
            path("<int:dead_letter_id>/replay/", wrap(self.replay_view), name="compensation_deadletter_replay"),
            path("<int:dead_letter_id>/discard/", wrap(self.settle_view), {"how": "discard"},
                 name="compensation_deadletter_discard"),
            path("<int:dead_letter_id>/resolve/", wrap(self.settle_view), {"how": "resolve"},
                 name="compensation_deadletter_resolve"),
            *super().get_urls(),
        ]

    def _context(self, request, title: str, **extra) -> dict:
        return {**self.admin_site.each_context(request), "opts": self.model._meta, "title": title, **extra}

    # the groups

    def groups_view(self, request):
        if not self.has_view_permission(request):
            raise PermissionDenied
        groups = open_dead_letter_groups(limit=GROUPS_SHOWN + 1)
        can_bulk_replay = self._can_bulk_replay(request)
        for group in groups:
            lookups = {"state__exact": DeadLetterState.OPEN, "flow__exact": group["flow"],
                       "error_signature__exact": group["error_signature"]}
            group["list_url"] = changelist_url(**lookups)
            # A bulk replay's filter cannot say "no signature": an empty one would take every signature.
            group["bulk_replay_url"] = (bulk_replay_url(flow=group["flow"], error_signature=group["error_signature"])
                                        if can_bulk_replay and group["error_signature"] else "")
        shown = groups[:GROUPS_SHOWN]
        context = self._context(
            request, gettext("Open dead letters by flow and error signature"), groups=shown,
            truncated=len(groups) > GROUPS_SHOWN, groups_shown=GROUPS_SHOWN,
            letters=sum(group["count"] for group in shown),
            all_url=changelist_url(state__exact=DeadLetterState.OPEN),
            start_bulk_replay_url=reverse("admin:compensation_bulkreplay_add") if can_bulk_replay else "")
        return TemplateResponse(request, "admin/compensation/deadletter/groups.html", context)

    def changelist_view(self, request, extra_context=None):
        extra_context = {**(extra_context or {}), "groups_url": reverse("admin:compensation_deadletter_groups")}
        return super().changelist_view(request, extra_context)

    # from the list

    @admin.action(description=_("Replay on the same resource"), permissions=["replay"])
    def replay(self, request, queryset):
        self._replay_selected(request, queryset, any_resource=False)

    @admin.action(description=_("Replay on any resource of the pool"), permissions=["replay"])
    def replay_on_any_resource(self, request, queryset):
        self._replay_selected(request, queryset, any_resource=True)

    def _replay_selected(self, request, queryset, *, any_resource: bool) -> None:
        """Replay each selected dead letter at once. At most a page of them: "select all" would start
        the whole queue in one request at no rate, against an upstream that may just have come
        back; a bulk replay counts them first and paces them."""
        if queryset[:self.list_per_page + 1].count() > self.list_per_page:
            self.message_user(request, gettext(
                "At most %(max)d dead letters are replayed from the list at once, and at no rate: narrow the list, "
                "or start a bulk replay (it counts them first and replays them at the rate you choose). Nothing was "
                "replayed.") % {"max": self.list_per_page}, messages.ERROR)
            return
        run_each(self, request, queryset,
                 lambda pk, actor: replay_dead_letter(dead_letter=pk, actor=actor, any_resource=any_resource),
                 done=replays_started)

    @admin.action(description=_("Discard (asks for a reason)"), permissions=["discard"])
    def discard(self, request, queryset):
        return self._settle_selected(request, queryset, "discard")

    @admin.action(description=_("Mark resolved (asks for a reason)"), permissions=["discard"])
    def resolve(self, request, queryset):
        return self._settle_selected(request, queryset, "resolve")

    def _settle_selected(self, request, queryset, how: str):
        """The confirmation page first (what is selected, a reason); its submit comes back to this
        action with post=yes and settles each one through the service."""
        words = SETTLE[how]
        form = ReasonForm(request.POST if request.POST.get("post") == "yes" else None)
        if form.is_bound and form.is_valid():
            reason = form.cleaned_data["reason"]
            run_each(self, request, queryset,
                     lambda pk, actor: words["call"](dead_letter=pk, actor=actor, reason=reason),
                     done=lambda settled: words["done"] % {"count": len(settled)})
            return None
        count = queryset.count()
        context = self._context(
            request, words["verb"], letters=queryset.select_related("resource")[:LISTED], count=count, form=form,
            question=words["question"] % {"count": count}, confirm=words["confirm"] % {"count": count},
            verb=words["verb"], action=how,
            selected=request.POST.getlist(ACTION_CHECKBOX_NAME), select_across=request.POST.get("select_across", "0"),
            action_checkbox_name=ACTION_CHECKBOX_NAME, back_url=reverse("admin:compensation_deadletter_changelist"))
        return TemplateResponse(request, self.confirmation_template, context)

    # from a dead letter's page

    def _letter(self, dead_letter_id: int) -> DeadLetter:
        return get_object_or_404(DeadLetter.objects.select_related("resource"), pk=dead_letter_id)

    def _confirm_one(self, request, letter: DeadLetter, form, *, verb, question, confirm, call, done):
        """A confirmation page for one dead letter (GET) and the service call (POST), back on its
        page; a refusal is shown on the form and nothing changed."""
        if request.method == "POST" and form.is_valid():
            try:
                result = call(form.cleaned_data)
            except DomainError as exc:
                form.add_refusal(exc)
            else:
                self.message_user(request, done(result), messages.SUCCESS)
                return HttpResponseRedirect(reverse("admin:compensation_deadletter_change", args=[letter.pk]))
        back = reverse("admin:compensation_deadletter_change", args=[letter.pk])
        title = gettext("%(verb)s: %(object)s") % {"verb": verb, "object": letter.display_name}
        context = self._context(request, title, letter=letter, letters=[letter], count=1, form=form,
                                question=question, confirm=confirm, verb=verb, back_url=back)
        return TemplateResponse(request, self.confirmation_template, context)

    def replay_view(self, request, dead_letter_id: int):
        if not self.has_replay_permission(request):
            raise PermissionDenied
        letter = self._letter(dead_letter_id)
        actor = request.user.get_username()
        return self._confirm_one(
            request, letter, ReplayForm(request.POST if request.method == "POST" else None),
            verb=gettext("Replay"), confirm=gettext("Yes, replay it"),
            question=gettext("Replay %(letter)s: run flow %(flow)s again with the dead task's payload?") % {
                "letter": letter.display_name, "flow": letter.flow},
            call=lambda data: replay_dead_letter(dead_letter=letter.pk, actor=actor,
                                                 any_resource=data["any_resource"], reason=data["reason"]),
            done=lambda replayed: gettext("Replaying %(letter)s as task %(task)s.") % {
                "letter": replayed.display_name, "task": replayed.replay_task_id})

    def settle_view(self, request, dead_letter_id: int, how: str):
        if not self.has_discard_permission(request):
            raise PermissionDenied
        letter, words = self._letter(dead_letter_id), SETTLE[how]
        actor = request.user.get_username()
        return self._confirm_one(
            request, letter, ReasonForm(request.POST if request.method == "POST" else None),
            verb=words["verb"], question=words["question"] % {"count": 1}, confirm=words["confirm"] % {"count": 1},
            call=lambda data: words["call"](dead_letter=letter.pk, actor=actor, reason=data["reason"]),
            done=lambda settled: words["done_one"] % {"letter": settled.display_name})

    def render_change_form(self, request, context, add=False, change=False, form_url="", obj=None):
        if obj is not None:
            context["console_audit_url"] = audit_url(request, obj)
        if obj is not None and obj.state == DeadLetterState.OPEN:
            replay, discard = self.has_replay_permission(request), self.has_discard_permission(request)
            context.update(
                console_replay_url=reverse("admin:compensation_deadletter_replay", args=[obj.pk]) if replay else "",
                console_discard_url=reverse("admin:compensation_deadletter_discard", args=[obj.pk]) if discard else "",
                console_resolve_url=reverse("admin:compensation_deadletter_resolve", args=[obj.pk]) if discard else "",
                console_bulk_replay_url=bulk_replay_url(flow=obj.flow, error_signature=obj.error_signature)
                if obj.error_signature and self._can_bulk_replay(request) else "",
            )
        return super().render_change_form(request, context, add=add, change=change, form_url=form_url, obj=obj)
