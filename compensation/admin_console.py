"""What the compensation console's ModelAdmins share: one service call per selected row, reported;
the link to an object's audit log."""

from urllib.parse import urlencode

from django.contrib import admin, messages
from django.db import models
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.translation import gettext, pgettext
from django.utils.translation import gettext_lazy as _

from audit.services import target_of
from retryops.errors import DomainError

# How many refusals one message spells out; the rest are counted.
REFUSALS_SHOWN = 5


def run_each(modeladmin, request, queryset, call, *, done) -> None:
    """Call one service per selected row (each its own transaction); report what was done and why
    the others were not. `call(pk, actor)` does it and returns what it changed; `done(results)`
    says what was done, in a sentence of its own (never a verb glued to a count)."""
    results, refused = [], []
    for pk in queryset.values_list("pk", flat=True):
        try:
            results.append(call(pk, request.user.get_username()))
        except DomainError as exc:
            refused.append(gettext("#%(id)s: %(reason)s") % {"id": pk, "reason": exc})
    if results:
        modeladmin.message_user(request, done(results), messages.SUCCESS)
    if refused:
        shown = pgettext("between refusals", "; ").join(refused[:REFUSALS_SHOWN])
        if len(refused) > REFUSALS_SHOWN:
            shown += gettext("; and %(count)d more") % {"count": len(refused) - REFUSALS_SHOWN}
        modeladmin.message_user(request, gettext("%(count)d refused: %(refusals)s") % {
            "count": len(refused), "refusals": shown}, messages.ERROR)


def linked_task(task_id: int | None) -> str:
    """A task, linked to its page, named in the reader's language."""
    if task_id is None:
        return "-"
    return format_html('<a href="{}">{}</a>', reverse("admin:scheduling_task_change", args=[task_id]),
                       gettext("task %(id)s") % {"id": task_id})


def replays_started(letters) -> str:
    """Which dead letter is replayed by which new task, each task linked, so the operator can
    follow the replay instead of looking for it."""
    shown = format_html_join(
        pgettext("between replays", ", "), "{}",
        ((format_html(gettext("{letter} as {task}"), letter=letter.display_name,
                      task=linked_task(letter.replay_task_id)),)
         for letter in letters[:REFUSALS_SHOWN]))
    more = len(letters) - REFUSALS_SHOWN
    if more > 0:
        shown = format_html("{}{}", shown, gettext("; and %(count)d more") % {"count": more})
    return format_html(gettext("Replaying {replays}."), replays=shown)


def span(seconds: float) -> str:
    """A duration as an operator reads it in a table: "45 s", "12 min", "3 h 05 min", "2 d 4 h"."""
    seconds = max(0, int(seconds))
    if seconds < 120:
        return gettext("%(s)d s") % {"s": seconds}
    minutes = seconds // 60
    if minutes < 120:
        return gettext("%(m)d min") % {"m": minutes}
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return gettext("%(h)d h %(m)02d min") % {"h": hours, "m": minutes}
    return gettext("%(d)d d %(h)d h") % {"d": hours // 24, "h": hours % 24}


@admin.display(description=_("work order"), ordering="work_order")
def work_order_shown(obj) -> str:
    """A list column: the work order of a dead letter or a runbook run, named in the reader's language."""
    return obj.work_order.display_name if obj.work_order_id else "-"


class ShownAs:
    """Mixed into the ModelAdmin of a dead letter or a runbook run: on its page the fields of
    SHOWN_AS are shown by a display method of their own, in the field's place; its work order is
    linked, named in the reader's language (its __str__ stays English: audit entries keep it)."""

    SHOWN_AS: dict[str, str] = {}

    def get_fields(self, request, obj=None):
        return list(dict.fromkeys(self.SHOWN_AS.get(name, name) for name in super().get_fields(request, obj)))

    @admin.display(description=_("work order"))
    def work_order_link(self, obj) -> str:
        if obj.work_order_id is None:
            return "-"
        return format_html('<a href="{}">{}</a>', reverse("admin:compensation_workorder_change",
                                                          args=[obj.work_order_id]), obj.work_order.display_name)


def audit_url(request, obj: models.Model) -> str:
    """The audit log of one object (audit_target_history_idx), for a user who may read it."""
    if not request.user.has_perm("audit.view_auditentry"):
        return ""
    target = target_of(obj)
    query = urlencode({"target_type": target.type, "target_id": target.id})
    return f"{reverse('admin:audit_auditentry_changelist')}?{query}"
