"""What the compensation console's ModelAdmins share: one service call per selected row, reported;
the link to an object's audit log."""

from urllib.parse import urlencode

from django.contrib import messages
from django.db import models
from django.urls import reverse
from django.utils.translation import gettext

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
            refused.append(f"#{pk}: {exc}")
    if done:
        modeladmin.message_user(request, gettext("%(verb)s %(count)d") % {"verb": verb, "count": done},
                                messages.SUCCESS)
    if refused:
        shown = "; ".join(refused[:REFUSALS_SHOWN])
        if len(refused) > REFUSALS_SHOWN:
            shown += gettext("; and %(count)d more") % {"count": len(refused) - REFUSALS_SHOWN}
        modeladmin.message_user(request, gettext("%(count)d refused: %(refusals)s") % {
            "count": len(refused), "refusals": shown}, messages.ERROR)


def audit_url(request, obj: models.Model) -> str:
    """The audit log of one object (audit_target_history_idx), for a user who may read it."""
    if not request.user.has_perm("audit.view_auditentry"):
        return ""
    target = target_of(obj)
    query = urlencode({"target_type": target.type, "target_id": target.id})
    return f"{reverse('admin:audit_auditentry_changelist')}?{query}"
