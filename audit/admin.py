"""The audit log in the admin: read-only, filterable, searchable, cheap on a table of millions."""

import json
from datetime import timedelta

from django import forms
from django.apps import apps
from django.contrib import admin, messages
from django.contrib.auth import get_user_model
from django.core.paginator import Paginator
from django.template.defaultfilters import truncatechars
from django.template.response import TemplateResponse
from django.utils import timezone
from django.utils.functional import cached_property
from django.utils.html import format_html
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from audit import selectors, services
from audit.choices import AuditAction
from audit.models import ApiClient, AuditEntry
from retryops.admin_filters import ReadOnlyAdmin
from retryops.errors import DomainError
from retryops.masking import mask_secrets

# Past this many matches the changelist stops counting: a count(*) of a filtered audit table
# scans every match on every page view. The last pages beyond it are reached by narrowing the filter.
COUNT_CAP = 10_000


class CappedCountPaginator(Paginator):
    """Counts at most COUNT_CAP rows (a LIMITed subquery), so paging costs the same on any table size."""

    @cached_property
    def count(self) -> int:
        return min(self.object_list[: COUNT_CAP + 1].count(), COUNT_CAP)


def type_label(target_type: str) -> str:
    """"resource" for resources.resource; the raw type for a model that no longer exists."""
    try:
        return str(apps.get_model(target_type)._meta.verbose_name)
    except (LookupError, ValueError):
        return target_type


class ExactFilter(admin.SimpleListFilter):
    """The rows whose `parameter_name` column is the chosen value."""

    def queryset(self, request, queryset):
        return queryset.filter(**{self.parameter_name: self.value()}) if self.value() else queryset


class ActionFilter(ExactFilter):
    # The known actions, not a DISTINCT over the table (which a plain list_filter would run).
    title = _("action")
    parameter_name = "action"

    def lookups(self, request, model_admin):
        return AuditAction.choices


class TargetTypeFilter(ExactFilter):
    title = _("target type")
    parameter_name = "target_type"

    def lookups(self, request, model_admin):
        return [(t, type_label(t)) for t in selectors.target_types()]


class ActorFilter(ExactFilter):
    # Who acted recently, not a DISTINCT over the table; any other actor is one ?actor= away
    # (or the search box).
    title = _("actor")
    parameter_name = "actor"

    def lookups(self, request, model_admin):
        actors = selectors.recent_actors()
        chosen = self.value()
        if chosen and chosen not in actors:
            actors = sorted([*actors, chosen])
        return [(actor, actor) for actor in actors]


# The time filter's choices: how far back from now. Served by the BRIN index on created_at.
WITHIN = {
    "1h": (timedelta(hours=1), _("Past hour")),
    "24h": (timedelta(hours=24), _("Past 24 hours")),
    "7d": (timedelta(days=7), _("Past 7 days")),
    "30d": (timedelta(days=30), _("Past 30 days")),
}


class WithinFilter(admin.SimpleListFilter):
    # Relative to now, unlike the admin's date filter ("today", "this month"): an operator looks
    # back from an incident. An exact window is ?created_at__gte=...&created_at__lt=...
    title = _("time")
    parameter_name = "within"

    def lookups(self, request, model_admin):
        return [(key, label) for key, (_delta, label) in WITHIN.items()]

    def queryset(self, request, queryset):
        if self.value() not in WITHIN:
            return queryset
        return queryset.filter(created_at__gte=timezone.now() - WITHIN[self.value()][0])


def json_block(value):
    """A JSON value on a read-only page: indented, with secrets masked."""
    if value is None:
        return "—"
    # Masked again when shown: entries written before masking existed may hold a secret.
    return format_html("<pre>{}</pre>", json.dumps(mask_secrets(value), indent=2, ensure_ascii=False,
                                                   sort_keys=True))


@admin.register(AuditEntry)
class AuditEntryAdmin(ReadOnlyAdmin):  # append-only: the database refuses changes anyway
    list_display = ("id", "created_at", "actor", "channel", "action_name", "target", "short_reason", "request_id")
    list_filter = (WithinFilter, ActorFilter, "channel", ActionFilter, TargetTypeFilter)
    # A facet count per choice would count the table once per actor and action.
    show_facets = admin.ShowFacets.NEVER
    search_fields = ("=request_id", "=actor", "=target_id", "target_label")
    show_full_result_count = False
    paginator = CappedCountPaginator
    fields = ("id", "created_at", "actor", "channel", "action_name", "target", "reason", "before_shown",
              "after_shown", "repairs", "request_id")
    readonly_fields = fields

    @admin.display(description=_("action"), ordering="action")
    def action_name(self, entry):
        return AuditAction(entry.action).label if entry.action in AuditAction.values else entry.action

    @admin.display(description=_("target"))
    def target(self, entry):
        label = f" {entry.target_label}" if entry.target_label else ""
        return gettext("%(type)s%(label)s (id %(id)s)") % {"type": type_label(entry.target_type), "label": label,
                                                            "id": entry.target_id}

    @admin.display(description=_("reason"))
    def short_reason(self, entry):
        return truncatechars(entry.reason, 80)

    @admin.display(description=_("before"))
    def before_shown(self, entry):
        return json_block(entry.before)

    @admin.display(description=_("after"))
    def after_shown(self, entry):
        return json_block(entry.after)


class ApiClientForm(forms.ModelForm):
    """A new client: its name and service user. The key is made by the service and shown once."""

    class Meta:
        model = ApiClient
        fields = ("name", "user")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if "user" in self.fields:  # the add page's; an existing client's page shows it read-only
            self.fields["user"].queryset = get_user_model().objects.filter(is_active=True).order_by("username")

    def clean_name(self):
        # The form's own unique check skips api_client_active_name_unique (its condition is on a
        # field the form does not have); the service refuses the name too, too late for a form.
        name = self.cleaned_data["name"]
        if selectors.api_clients().filter(name=name).exists():
            raise forms.ValidationError(gettext("An active API client has this name: revoke it first, or choose "
                                                "another name."))
        return name


@admin.register(ApiClient)
class ApiClientAdmin(admin.ModelAdmin):
    """The REST API's clients: create one (its key is shown on the next page, once), revoke keys."""

    form = ApiClientForm
    list_display = ("name", "key_prefix", "user", "active", "created_at", "created_by", "last_used_at", "revoked_at")
    list_filter = (("revoked_at", admin.EmptyFieldListFilter),)
    list_select_related = ("user",)
    search_fields = ("name", "=key_prefix")
    actions = ["revoke_selected"]
    shown = ("name", "key_prefix", "user", "created_at", "created_by", "last_used_at", "revoked_at")

    def get_fields(self, request, obj=None):
        return self.shown if obj is not None else ("name", "user")

    def get_readonly_fields(self, request, obj=None):
        return self.shown if obj is not None else ()

    def has_change_permission(self, request, obj=None):
        return False  # a client is created and revoked, never edited: its page is read-only

    def has_delete_permission(self, request, obj=None):
        return False  # revoke instead: the audit log's entries keep naming the client

    def has_revoke_permission(self, request) -> bool:
        return request.user.has_perm("audit.change_apiclient")

    @admin.display(description=_("active"), boolean=True)
    def active(self, client):
        return client.revoked_at is None

    def save_model(self, request, obj, form, change):
        created, key = services.create_api_client(name=form.cleaned_data["name"], user=form.cleaned_data["user"],
                                                  actor=request.user.get_username())
        obj.pk, obj.key_prefix, obj.created_at = created.pk, created.key_prefix, created.created_at
        request._api_key_once = key

    def response_add(self, request, obj, post_url_continue=None):
        # The key is rendered into this answer and kept nowhere: not in a message (a cookie or the
        # session), not in the row.
        context = {**self.admin_site.each_context(request), "opts": self.model._meta, "client": obj,
                   "key": request._api_key_once, "title": gettext("API client %(name)s created") % {"name": obj.name}}
        response = TemplateResponse(request, "admin/audit/apiclient/key_once.html", context)
        response["Cache-Control"] = "no-store"
        return response

    @admin.action(description=_("Revoke the keys of the selected API clients"), permissions=["revoke"])
    def revoke_selected(self, request, queryset):
        revoked = []
        for client in queryset.filter(revoked_at__isnull=True):
            try:
                services.revoke_api_client(client=client.pk, actor=request.user.get_username())
            except DomainError as exc:  # revoked meanwhile by someone else
                self.message_user(request, str(exc), messages.WARNING)
            else:
                revoked.append(client.name)
        if revoked:
            self.message_user(request, gettext("Revoked: %(names)s. Their next request is refused.") % {
                "names": ", ".join(revoked)}, messages.SUCCESS)
