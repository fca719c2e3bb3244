"""What the compensation console's ModelAdmins share: one service call per selected row, reported;
the link to an object's audit log."""

from urllib.parse import urlencode

from django.contrib import admin, messages
from django.db import models
from django.urls import reverse
from django.utils.html import format_html
from django.utils.translation import gettext, pgettext
from django.utils.translation import gettext_lazy as _

from audit.services import target_of
from retryops.errors import DomainError

# How many refusals one message spells out; the rest are counted.
REFUSALS_SHOWN = 5


def run_each(modeladmin, request, queryset, verb: str, call) -> None:
    """Call one service per selected row (each its own transaction); report how many did and why
    the others did not. `verb` says what was done ("discarded"), `call(pk, actor)` does it."""
    done, refused = 0, []
    for pk in queryset.values_list("pk", flat=True):
        try:
            call(pk, request.user.get_username())
            done += 1
        except DomainError as exc:
            refused.append(gettext("#%(id)s: %(reason)s") % {"id": pk, "reason": exc})
    if done:
        modeladmin.message_user(request, gettext("%(verb)s %(count)d") % {"verb": verb, "count": done},
                                messages.SUCCESS)
    if refused:
        shown = pgettext("between refusals", "; ").join(refused[:REFUSALS_SHOWN])
        if len(refused) > REFUSALS_SHOWN:
            shown += gettext("; and %(count)d more") % {"count": len(refused) - REFUSALS_SHOWN}
        modeladmin.message_user(request, gettext("%(count)d refused: %(refusals)s") % {
            "count": len(refused), "refusals": shown}, messages.ERROR)


@admin.display(description=_("work order"), ordering="work_order")
def work_order_shown(obj) -> str:
    """A list column: the work order of a dead letter or a runbook run, named in the reader's language."""
    return obj.work_order.display_name if obj.work_order_id else "-"


def work_order_link(obj) -> str:
    """On a dead letter's or a runbook run's page: its work order, linked, named in the reader's language."""
    if obj.work_order_id is None:
        return "-"
    return format_html('<a href="{}">{}</a>', reverse("admin:compensation_workorder_change", args=[obj.work_order_id]),
                       obj.work_order.display_name)


def audit_url(request, obj: models.Model) -> str:
    """The audit log of one object (audit_target_history_idx), for a user who may read it."""
    if not request.user.has_perm("audit.view_auditentry"):
        return ""
    target = target_of(obj)
    query = urlencode({"target_type": target.type, "target_id": target.id})
    return f"{reverse('admin:audit_auditentry_changelist')}?{query}"
