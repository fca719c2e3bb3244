"""The console's pool and resource pages. Every write goes through resources.services (which also
writes its audit entry), so every state and statistics field is read-only here.

The resource page is defined here once. An app above resources adds to it through
ResourcePageExtension (scheduling adds "retry this resource"): resources may import none of them."""

import json

from django.conf import settings
from django.contrib import admin
from django.contrib.admin.options import IS_POPUP_VAR
from django.core.exceptions import PermissionDenied
from django.http import Http404
from django.template.defaultfilters import truncatechars
from django.urls import path, reverse
from django.utils.html import format_html
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from resources import services
from resources.admin_bulk import OPERATIONS, ResourceBulkActions
from resources.admin_changelist import (
    DiagnosisFilter,
    EstimatedCountPaginator,
    FailedWithinFilter,
    ResourceChangeList,
)
from resources.choices import Diagnosis, ResourceState
from resources.forms import ResourceForm
from resources.models import Resource, ResourcePool
from resources.selectors import DiagnosisRule, diagnosis_report, timeline_page
from retryops.errors import DomainError
from retryops.masking import mask_secrets

# Written by resources.services only. probe_after and the cooldown belong here too: a value
# posted back from a page rendered before a probe or a quarantine would revive or cancel a probe.
_STATE_FIELDS = (
    "state", "lease_token", "lease_kind", "lease_holder", "leased_at", "leased_until",
    "failure_count", "success_count", "consecutive_failures", "last_failure_reason",
    "last_failure_category", "last_failure_at", "last_failure_signature", "last_success_at", "quarantine_reason",
    "quarantined_at", "probe_after", "probation_cooldown_seconds", "created_at",
)
from retryops.display import short_time

STATE_COLOURS = {
    ResourceState.AVAILABLE: "#2e7d32", ResourceState.IN_USE: "#1565c0", ResourceState.DONE: "#616161",
    ResourceState.FAILED: "#e65100", ResourceState.QUARANTINED: "#b71c1c",
}
DIAGNOSIS_COLOURS = {Diagnosis.ENVIRONMENT: "#6a1b9a", Diagnosis.RESOURCE: "#b71c1c", Diagnosis.UNCLEAR: "#616161"}
DIAGNOSIS_HINTS = {
    Diagnosis.ENVIRONMENT: _("The same failure hit many resources of its pool at about the same time."),
    Diagnosis.RESOURCE: _("It keeps failing while the rest of its pool succeeds."),
    Diagnosis.UNCLEAR: _("Failing, but neither its pool nor the resource is clearly at fault."),
}
TIMELINE_PAGE_SIZE = 50


def merge_patch_between(before, after):
    """The JSON merge patch (RFC 7396) that turns `before` into `after`: the keys changed or added,
    a key removed as None; objects within compared the same way, anything else replaced."""
    if not isinstance(before, dict) or not isinstance(after, dict):
        return after
    patch = {key: None for key in before if key not in after}
    for key, value in after.items():
        if key not in before or before[key] != value:
            patch[key] = merge_patch_between(before.get(key), value) if isinstance(before.get(key), dict) else value
    return patch


def edited_fields(form) -> dict:
    """Only what the operator typed in, for a service that writes just those fields: the row may
    have changed since the admin read it (a claim, a release, a sweep, a tick, another operator),
    and writing the whole form back would put the old values back. With EditsWhatThePageShowed
    "typed in" means changed from what the page showed."""
    return {name: form.cleaned_data[name] for name in form.changed_data if name in form.fields}


class EditsWhatThePageShowed:
    """Mixed into a ModelAdmin whose change page saves through edited_fields. Django's
    changed_data compares the post with the row as it is when the post arrives, so a value the
    page showed before someone else changed it counts as typed in and is written back over the
    change. Each field carries a hidden copy of the value the page showed, and the comparison is
    with that."""

    def get_form(self, request, obj=None, **kwargs):
        form = super().get_form(request, obj, **kwargs)
        if obj is None:
            return form

        class ShownForm(form):
            def __init__(self, *args, **kwargs):
                super().__init__(*args, **kwargs)
                for field in self.fields.values():
                    field.show_hidden_initial = True

        ShownForm.__name__ = form.__name__
        return ShownForm


def masked_json(value) -> str:
    """A JSON value as a read-only page shows it: on one line, with the values of secret keys
    masked (retryops.masking). A string is shown as it is."""
    masked = mask_secrets(value)
    return masked if isinstance(masked, str) else json.dumps(masked, ensure_ascii=False)


def masked_json_display(field: str, *, description):
    """A ModelAdmin display method showing the JSON field `field` masked, to put in its place on
    a page that shows the row read-only (see MaskedWhenReadOnly)."""

    @admin.display(description=description)
    def shown(model_admin, obj):
        value = getattr(obj, field)
        return model_admin.get_empty_value_display() if value is None else masked_json(value)

    return shown


class MaskedWhenReadOnly:
    """Mixed into a ModelAdmin whose form shows a JSON field masked (in its `initial`). A user
    without change permission gets no form: Django renders every field read-only, straight from
    the row, secrets and all. For them each field of SHOWN_MASKED is replaced by its display
    method (made with masked_json_display)."""

    SHOWN_MASKED: dict[str, str] = {}

    def get_fieldsets(self, request, obj=None):
        fieldsets = super().get_fieldsets(request, obj)
        if obj is None or self.has_change_permission(request, obj):
            return fieldsets
        return [(name, {**options, "fields": [self._shown_masked(entry) for entry in options["fields"]]})
                for name, options in fieldsets]

    def _shown_masked(self, entry):
        if isinstance(entry, (list, tuple)):  # fields on one line
            return type(entry)(self.SHOWN_MASKED.get(field, field) for field in entry)
        return self.SHOWN_MASKED.get(entry, entry)


def badge(text, colour: str, title: str = ""):
    return format_html('<span class="console-badge" style="background:{}" title="{}">{}</span>', colour, title, text)


@admin.register(ResourcePool)
class ResourcePoolAdmin(EditsWhatThePageShowed, admin.ModelAdmin):
    list_display = ("name", "resource_noun", "lease_seconds", "consume_on_success", "created_at")
    search_fields = ("name",)
    readonly_fields = ("created_at",)

    def has_delete_permission(self, request, obj=None):
        return False  # no service deletes a pool, so a delete here would leave no audit entry

    def formfield_for_dbfield(self, db_field, request, **kwargs):
        if db_field.name == "lease_seconds":  # the service's bounds, said under the field (not a 500 from save_model)
            kwargs.update(min_value=1, max_value=settings.RETRYOPS_MAX_LEASE_SECONDS)
        return super().formfield_for_dbfield(db_field, request, **kwargs)

    def save_model(self, request, obj, form, change):
        actor = request.user.get_username()
        if change:
            services.change_pool(pool=obj.pk, actor=actor, **edited_fields(form))
            return
        created = services.create_pool(name=obj.name, resource_noun=obj.resource_noun, lease_seconds=obj.lease_seconds,
                                       consume_on_success=obj.consume_on_success, description=obj.description,
                                       actor=actor)
        obj.pk, obj.created_at = created.pk, created.created_at


class ResourcePageExtension:
    """What an app above resources adds to the resource pages, registered with
    ResourceAdmin.extend() from that app's admin module. Each hook is given the request, so it
    shows only what the operator may do."""

    def columns(self, request) -> list:
        """List columns (admin display callables), placed right after the state."""
        return []

    def actions(self, request) -> list:
        """Admin actions (modeladmin, request, queryset) for the list's action menu."""
        return []

    def buttons(self, request, resource) -> list[dict]:
        """The change page's buttons, [{"url", "label"}], before the resource's own operations."""
        return []

    def panel(self, request, resource) -> str:
        """HTML shown under the resource's timeline."""
        return ""


@admin.register(Resource)
class ResourceAdmin(MaskedWhenReadOnly, EditsWhatThePageShowed, ResourceBulkActions, admin.ModelAdmin):
    form = ResourceForm
    SHOWN_MASKED = {"attributes": "attributes_shown"}
    change_form_template = "admin/resources/resource/change_form.html"
    # The diagnosis beside the state: at 1366 px the last columns may be beyond the list's edge,
    # and "the resource or the environment?" is what an operator opens the list to see.
    list_display = (
        "key", "pool", "state_badge", "diagnosis_badge", "failures", "successes", "in_a_row", "reason", "category",
        "failed_at", "succeeded_at",
    )
    list_filter = ("pool", "state", "last_failure_category", DiagnosisFilter, FailedWithinFilter)
    list_select_related = ("pool",)
    search_fields = ("key", "last_failure_reason")
    search_help_text = _("A resource's key or a part of its last failure reason.")
    ordering = ("-last_failure_at",)
    readonly_fields = _STATE_FIELDS
    show_full_result_count = False  # a count(*) of 100,000+ rows on every page view is not free
    show_facets = admin.ShowFacets.NEVER  # a count per filter option, the diagnosis's included, on every view
    paginator = EstimatedCountPaginator
    actions = ["reset_selected", "quarantine_selected", "unquarantine_selected"]
    extensions: list[ResourcePageExtension] = []

    @classmethod
    def extend(cls, extension: ResourcePageExtension) -> None:
        cls.extensions.append(extension)

    def get_list_display(self, request):
        shown = list(super().get_list_display(request))
        at = shown.index("state_badge") + 1  # beside the state: the end of a wide list is off screen
        added = [column for extension in self.extensions for column in extension.columns(request)]
        return [*shown[:at], *added, *shown[at:]]

    def get_actions(self, request):
        actions = super().get_actions(request)
        if self.actions is not None and IS_POPUP_VAR not in request.GET:  # as Django's: none in a popup
            for extension in self.extensions:
                for action in extension.actions(request):
                    func, name, description = self.get_action(action)
                    actions[name] = (func, name, description)
        return actions

    def get_changelist(self, request, **kwargs):
        return ResourceChangeList

    def changelist_view(self, request, extra_context=None):
        extra_context = {"diagnosis_rule": DiagnosisRule.from_settings().sentence(), **(extra_context or {})}
        return super().changelist_view(request, extra_context)

    def has_delete_permission(self, request, obj=None):
        return False  # no service deletes a resource (quarantine it), so a delete would leave no audit entry

    def get_readonly_fields(self, request, obj=None):
        # The pool and key of an existing resource are its identity in every timeline row.
        return (("pool", "key") if obj else ()) + _STATE_FIELDS

    def get_fields(self, request, obj=None):
        return ["pool", "key", "label", "attributes", *_STATE_FIELDS] if obj else ["pool", "key", "label", "attributes"]

    def save_model(self, request, obj, form, change):
        actor = request.user.get_username()
        if change:
            fields = edited_fields(form)
            if "attributes" in fields:
                # What the operator changed of what the page showed, merged into the attributes as
                # they are now: a key another system set meanwhile (the API's PATCH) is kept.
                shown = form.fields["attributes"].to_python(form.data.get(form["attributes"].html_initial_name))
                fields.update(attributes=merge_patch_between(shown, fields["attributes"]), merge_attributes=True)
            services.change_resource(resource=obj.pk, actor=actor, **fields)
            return
        [created] = services.add_resources(pool=obj.pool, actor=actor, resources=[
            {"key": obj.key, "label": obj.label, "attributes": obj.attributes}])
        obj.pk, obj.created_at = created.pk, created.created_at

    attributes_shown = masked_json_display("attributes", description=Resource._meta.get_field("attributes").verbose_name)

    # the list's columns

    @admin.display(description=_("state"), ordering="state")
    def state_badge(self, resource):
        return badge(resource.get_state_display(), STATE_COLOURS.get(resource.state, "#616161"))

    @admin.display(description=_("failures"), ordering="failure_count")
    def failures(self, resource):
        return resource.failure_count

    @admin.display(description=_("successes"), ordering="success_count")
    def successes(self, resource):
        return resource.success_count

    @admin.display(description=_("failures in a row"), ordering="consecutive_failures")
    def in_a_row(self, resource):
        return resource.consecutive_failures

    @admin.display(description=_("last failure reason"))
    def reason(self, resource):
        text = resource.last_failure_reason
        return format_html('<span title="{}">{}</span>', text, truncatechars(text, 60)) if text else ""

    @admin.display(description=_("category"), ordering="last_failure_category")
    def category(self, resource):
        return resource.get_last_failure_category_display()

    @admin.display(description=_("last failure"), ordering="last_failure_at")
    def failed_at(self, resource):
        return short_time(resource.last_failure_at)

    @admin.display(description=_("last success"), ordering="last_success_at")
    def succeeded_at(self, resource):
        return short_time(resource.last_success_at)

    @admin.display(description=_("diagnosis"))
    def diagnosis_badge(self, resource):
        # Annotated by ResourceChangeList in the rows' own query; absent on a row read elsewhere.
        value = getattr(resource, "diagnosis", "")
        if not value:
            return ""
        return badge(Diagnosis(value).label, DIAGNOSIS_COLOURS[value], DIAGNOSIS_HINTS[value])

    # the resource's page

    def get_urls(self):
        info = self.model._meta.app_label, self.model._meta.model_name
        return [
            path("<int:object_id>/operation/<str:operation>/", self.admin_site.admin_view(self.operation_view),
                 name="%s_%s_operation" % info),
            *super().get_urls(),
        ]

    def operation_view(self, request, object_id, operation):
        """A button on the resource's page: the bulk action's confirmation and result, for one resource."""
        chosen = OPERATIONS.get(operation)
        if chosen is None:
            raise Http404(gettext("No such operation: %(name)s") % {"name": operation})
        if not self.has_operation_permission(request, chosen):
            raise PermissionDenied
        queryset = self.get_queryset(request).filter(pk=object_id)
        if not queryset.exists():
            raise Http404(gettext("No resource with id %(id)s") % {"id": object_id})
        back = reverse("admin:resources_resource_change", args=[object_id])
        return self._run_bulk(request, queryset, chosen, back_url=back)

    def get_object_buttons(self, request, resource) -> list[dict]:
        """The change page's buttons, [{"url", "label"}]: the operations this operator may apply to
        the resource in its state, after what the extensions add."""
        return [
            *(button for extension in self.extensions for button in extension.buttons(request, resource)),
            *({"url": reverse("admin:resources_resource_operation", args=[resource.pk, name]),
               "label": operation.verb}
              for name, operation in OPERATIONS.items()
              if resource.state in operation.states and self.has_operation_permission(request, operation)),
        ]

    def render_change_form(self, request, context, add=False, change=False, form_url="", obj=None):
        if obj is not None and obj.pk is not None:
            try:
                report = diagnosis_report(obj)
            except DomainError:  # removed while the page was being built
                raise Http404(gettext("No resource with id %(id)s") % {"id": obj.pk}) from None
            context.update(
                console_buttons=self.get_object_buttons(request, obj),
                diagnosis=report,
                diagnosis_colour=DIAGNOSIS_COLOURS.get(report.diagnosis, ""),
            )
            page = timeline_page(resource=obj, page=request.GET.get("timeline"), per_page=TIMELINE_PAGE_SIZE)
            for event in page:  # shown, never saved: rows written before masking may hold a secret
                event.details = mask_secrets(event.details)
            context.update(timeline=page, timeline_pages=page.paginator.get_elided_page_range(page.number),
                           extension_panels=[extension.panel(request, obj) for extension in self.extensions])
        return super().render_change_form(request, context, add=add, change=change, form_url=form_url, obj=obj)
