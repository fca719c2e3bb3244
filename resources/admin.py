"""Plain admin for pools and resources. State changes go through resources.services only, so
every state and statistics field is read-only here; the operator console is a later issue."""

from django.contrib import admin

from resources.models import Resource, ResourceEvent, ResourcePool

_STATE_FIELDS = (
    "state", "lease_token", "lease_holder", "leased_at", "leased_until",
    "failure_count", "success_count", "consecutive_failures", "last_failure_reason",
    "last_failure_category", "last_failure_at", "last_success_at", "quarantine_reason", "quarantined_at",
)


@admin.register(ResourcePool)
class ResourcePoolAdmin(admin.ModelAdmin):
    list_display = ("name", "resource_noun", "lease_seconds", "consume_on_success", "created_at")
    search_fields = ("name",)


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

    def get_readonly_fields(self, request, obj=None):
        # The pool and key of an existing resource are its identity in every timeline row.
        return _STATE_FIELDS + (("pool", "key") if obj else ())
