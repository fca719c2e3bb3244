"""Plain admin for pools and resources. Every write goes through resources.services (which also
writes its audit entry), so every state and statistics field is read-only here; the operator
console is a later issue."""

import json

from django import forms
from django.contrib import admin
from django.forms.fields import InvalidJSONInput

from resources import services
from resources.models import Resource, ResourceEvent, ResourcePool
from retryops.jsonsafe import UnstorableValue, check_text, refuse_unstorable

# Written by resources.services only. probe_after and the cooldown belong here too: a value
# posted back from a page rendered before a probe or a quarantine would revive or cancel a probe.
_STATE_FIELDS = (
    "state", "lease_token", "lease_kind", "lease_holder", "leased_at", "leased_until",
    "failure_count", "success_count", "consecutive_failures", "last_failure_reason",
    "last_failure_category", "last_failure_at", "last_success_at", "quarantine_reason", "quarantined_at",
    "probe_after", "probation_cooldown_seconds", "created_at",
)


def edited_fields(form) -> dict:
    """Only what the operator typed in, for a service that writes just those fields: the row may
    have changed since the admin read it (a claim, a release, a sweep, a tick), and writing the
    whole form back would put the old values back."""
    return {name: form.cleaned_data[name] for name in form.changed_data if name in form.fields}


class StorableJSONField(forms.JSONField):
    """forms.JSONField that answers JSON it cannot read or show back with a field error instead of
    a server error: nesting past Python's recursion limit (json.loads raises RecursionError, which
    Django does not catch), and, when the page comes back with an error, a lone surrogate, which
    Django shows as itself (ensure_ascii=False) and no UTF-8 page can hold."""

    def to_python(self, value):
        try:
            return super().to_python(value)
        except RecursionError:
            raise forms.ValidationError("nested too deeply to store", code="invalid") from None

    def bound_data(self, data, initial):
        try:
            return super().bound_data(data, initial)
        except RecursionError:
            return InvalidJSONInput(data)

    def prepare_value(self, value):
        shown = super().prepare_value(value)
        if isinstance(value, InvalidJSONInput) or not check_text(shown):
            return shown
        return json.dumps(value, cls=self.encoder)  # escaped: \ud800, \u0000


def storable_json_object(value, *, name: str) -> dict:
    """A form's JSON field as an object PostgreSQL can store (empty: {}), or a ValidationError
    naming the place. forms.JSONField reads NaN, Infinity and \\u0000, which jsonb refuses."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        kind = "a list" if isinstance(value, list) else "a string" if isinstance(value, str) else repr(value)
        raise forms.ValidationError(f"{name} must be a JSON object ({{...}}), got {kind}")
    try:
        return refuse_unstorable(value, name=name)
    except UnstorableValue as exc:
        raise forms.ValidationError(str(exc)) from None


class ResourceForm(forms.ModelForm):
    class Meta:
        model = Resource
        fields = ["pool", "key", "label", "attributes"]
        field_classes = {"attributes": StorableJSONField}

    def clean_attributes(self):
        return storable_json_object(self.cleaned_data.get("attributes"), name="attributes")


@admin.register(ResourcePool)
class ResourcePoolAdmin(admin.ModelAdmin):
    list_display = ("name", "resource_noun", "lease_seconds", "consume_on_success", "created_at")
    search_fields = ("name",)
    readonly_fields = ("created_at",)

    def has_delete_permission(self, request, obj=None):
        return False  # no service deletes a pool, so a delete here would leave no audit entry

    def save_model(self, request, obj, form, change):
        actor = request.user.get_username()
        if change:
            services.change_pool(pool=obj.pk, actor=actor, **edited_fields(form))
            return
        created = services.create_pool(name=obj.name, resource_noun=obj.resource_noun, lease_seconds=obj.lease_seconds,
                                       consume_on_success=obj.consume_on_success, description=obj.description,
                                       actor=actor)
        obj.pk, obj.created_at = created.pk, created.created_at


class ResourceEventInline(admin.TabularInline):
    model = ResourceEvent
    fields = ("created_at", "kind", "actor", "reason", "category", "lease_token")
    readonly_fields = fields
    ordering = ("-id",)
    extra = 0
    can_delete = False
    max_num = 0


@admin.register(Resource)
class ResourceAdmin(admin.ModelAdmin):
    form = ResourceForm
    list_display = (
        "key", "pool", "state", "failure_count", "last_failure_reason", "last_failure_at", "success_count",
        "lease_holder",
    )
    list_filter = ("pool", "state", "last_failure_category")
    list_select_related = ("pool",)
    search_fields = ("key", "label")
    readonly_fields = _STATE_FIELDS
    show_full_result_count = False  # a count(*) of 100,000+ rows on every page view is not free
    inlines = [ResourceEventInline]

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
            services.change_resource(resource=obj.pk, actor=actor, **edited_fields(form))
            return
        [created] = services.add_resources(pool=obj.pool, actor=actor, resources=[
            {"key": obj.key, "label": obj.label, "attributes": obj.attributes}])
        obj.pk, obj.created_at = created.pk, created.created_at
