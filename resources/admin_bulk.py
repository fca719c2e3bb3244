"""The console's bulk actions on resources (reset, quarantine, release from quarantine): a
confirmation page that says how many and which, then one service call per resource, each in its
own transaction, so one refusal never stops the others, and a result page that says which
succeeded and why each refusal was refused."""

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from django.contrib import admin
from django.contrib.admin import helpers
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.translation import gettext, ngettext_lazy
from django.utils.translation import gettext_lazy as _

from resources import services
from resources.choices import ResourceState
from resources.forms import ResourceActionForm
from resources.models import Resource
from retryops.errors import DomainError

log = logging.getLogger(__name__)

# One request does at most this many service calls (a few milliseconds each); an operator with
# more narrows the list with its filters first.
MAX_BULK = 500


@dataclass(frozen=True)
class ResourceOperation:
    """One state change an operator applies to resources, and the words the pages use for it."""

    action: str  # the ModelAdmin action that runs it
    permission: str  # the ModelAdmin's has_<permission>_permission checks it
    verb: str
    question: str  # singular and plural, by "%(count)d"
    done: str
    call: Callable[..., Resource]
    reason_required: bool = False
    states: tuple[str, ...] = ()  # the states it applies to, for the buttons (the service decides)


OPERATIONS = {
    "reset": ResourceOperation(
        action="reset_selected", permission="reset", verb=_("Reset"),
        question=ngettext_lazy(
            "Reset this resource? A failed or consumed one becomes available again; its counters, reasons and "
            "timeline stay.",
            "Reset these %(count)d resources? Failed and consumed ones become available again; their counters, "
            "reasons and timeline stay.", "count"),
        done=_("Reset"), call=services.reset, states=(ResourceState.FAILED, ResourceState.DONE)),
    "quarantine": ResourceOperation(
        action="quarantine_selected", permission="quarantine", verb=_("Quarantine"),
        question=ngettext_lazy(
            "Quarantine this resource? Nothing claims it until someone releases it.",
            "Quarantine these %(count)d resources? Nothing claims them until someone releases them.", "count"),
        done=_("Quarantined"), call=services.quarantine, reason_required=True,
        states=(ResourceState.AVAILABLE, ResourceState.FAILED, ResourceState.DONE)),
    "unquarantine": ResourceOperation(
        action="unquarantine_selected", permission="quarantine", verb=_("Release from quarantine"),
        question=ngettext_lazy(
            "Release this resource from quarantine? It becomes available again.",
            "Release these %(count)d resources from quarantine? They become available again.", "count"),
        done=_("Released from quarantine"), call=services.unquarantine, states=(ResourceState.QUARANTINED,)),
}


@dataclass
class BulkOutcome:
    """What one bulk action did: the resources it changed, and each one it could not change with why."""

    succeeded: list[Resource] = field(default_factory=list)
    refused: list[tuple[Resource, str]] = field(default_factory=list)


def apply(operation: ResourceOperation, resources: list[Resource], *, actor: str, reason: str) -> BulkOutcome:
    outcome = BulkOutcome()
    for resource in resources:
        try:
            changed = operation.call(resource=resource.pk, actor=actor, reason=reason)
        except DomainError as exc:
            outcome.refused.append((resource, str(exc)))
        except Exception as exc:  # one surprise must not stop the others; it is logged with its traceback
            log.exception("%s of resource %s failed", operation.action, resource.pk)
            outcome.refused.append((resource, gettext("unexpected error: %(error)s") % {
                "error": f"{type(exc).__name__}: {exc}"}))
        else:
            outcome.succeeded.append(changed)
    return outcome


class ResourceBulkActions:
    """Mixed into the resource's ModelAdmin: the three actions, their pages and their permissions."""

    bulk_confirmation_template = "admin/resources/resource/bulk_confirmation.html"
    bulk_result_template = "admin/resources/resource/bulk_result.html"

    def has_reset_permission(self, request, obj=None) -> bool:
        return request.user.has_perm("resources.reset_resource")

    def has_quarantine_permission(self, request, obj=None) -> bool:
        return request.user.has_perm("resources.quarantine_resource")

    def has_operation_permission(self, request, operation: ResourceOperation) -> bool:
        return getattr(self, f"has_{operation.permission}_permission")(request)

    def bulk_selection(self, request, queryset) -> list[Resource] | None:
        """The selected resources in the order the pages list them, or None, said to the operator,
        when there are more than one request may act on (MAX_BULK): "select all" on the whole list
        selects every resource of the table."""
        resources = list(queryset.select_related("pool").order_by("pool_id", "key")[:MAX_BULK + 1])
        if len(resources) > MAX_BULK:
            self.message_user(request, gettext(
                "At most %(max)d resources at once: narrow the list with its filters first. Nothing was changed.")
                % {"max": MAX_BULK}, level="error")
            return None
        return resources

    def _run_bulk(self, request, queryset, operation: ResourceOperation, *, back_url: str | None = None):
        """The confirmation page (first POST from the list, or a button's GET), then, once confirmed,
        the operation and its result page."""
        resources = self.bulk_selection(request, queryset)
        if resources is None:
            return None
        confirmed = request.method == "POST" and request.POST.get("post") == "yes"
        form = ResourceActionForm(request.POST if confirmed else None, reason_required=operation.reason_required)
        if confirmed and form.is_valid():
            outcome = apply(operation, resources, actor=request.user.get_username(),
                            reason=form.cleaned_data["reason"])
            return self._bulk_page(request, self.bulk_result_template, operation, resources,
                                   title=gettext("%(verb)s: %(done)d of %(count)d done") % {
                                       "verb": operation.verb, "done": len(outcome.succeeded),
                                       "count": len(resources)},
                                   outcome=outcome, back_url=back_url)
        return self._bulk_page(request, self.bulk_confirmation_template, operation, resources,
                               title=operation.question % {"count": len(resources)}, form=form, back_url=back_url)

    def _bulk_page(self, request, template, operation, resources, *, title, back_url, **extra):
        opts = self.model._meta
        context = {
            **self.admin_site.each_context(request), "opts": opts, "title": title, "operation": operation,
            "resources": resources, "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
            # Confirmed from the list, it posts to the list without its filters: a resource that
            # left the filtered list meanwhile is still acted on, or refused with its reason.
            "changelist_url": reverse(f"admin:{opts.app_label}_{opts.model_name}_changelist"),
            "back_url": back_url, "form_action": request.get_full_path() if back_url else "",
            **extra,
        }
        return TemplateResponse(request, template, context)

    @admin.action(description=_("Reset selected resources"), permissions=["reset"])
    def reset_selected(self, request, queryset):
        return self._run_bulk(request, queryset, OPERATIONS["reset"])

    @admin.action(description=_("Quarantine selected resources"), permissions=["quarantine"])
    def quarantine_selected(self, request, queryset):
        return self._run_bulk(request, queryset, OPERATIONS["quarantine"])

    @admin.action(description=_("Release selected resources from quarantine"), permissions=["quarantine"])
    def unquarantine_selected(self, request, queryset):
        return self._run_bulk(request, queryset, OPERATIONS["unquarantine"])
