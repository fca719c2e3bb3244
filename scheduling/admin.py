"""Plain admin for tasks, attempts, policies and batch configs. Task and attempt state is
written only by scheduling.services, so it is read-only here; policy edits go through the
service that records each change."""

import json

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.utils import display_for_value
from django.http import HttpResponseRedirect
from django.template.defaultfilters import truncatechars
from django.utils.html import format_html_join
from django.utils.safestring import mark_safe
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from resources.admin import (
    EditsWhatThePageShowed,
    MaskedWhenReadOnly,
    edited_fields,
    masked_json_display,
)
from resources.forms import StorableJSONField, refuse_unknown_masks, storable_json_object
from retryops.admin_filters import ReadOnlyAdmin
from retryops.errors import DomainError
from retryops.masking import mask_secrets
from scheduling import services, whatif
from scheduling.admin_analysis import TransienceConsole
from scheduling.admin_console import TaskConsole
from scheduling.admin_filters import (
    AttemptPolicyFilter,
    FailedWithFilter,
    FlowFilter,
    NextRunFilter,
    PolicyFilter,
    RetryOverdueFilter,
    RetryStartFilter,
    ScheduledForFilter,
    TaskFailedWithFilter,
)
from scheduling.choices import WAITING_STATES, TaskState
from scheduling.errors import BadPolicy, FlowNotFound
from scheduling.models import (
    Attempt,
    BatchConfig,
    RetryPolicy,
    RetryPolicyChange,
    Task,
    TaskEvent,
)
from scheduling.policies import clean_patterns, clean_policy
from scheduling.services.policies import POLICY_FIELDS, policy_snapshot


def _shown(value) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _lines(pairs):
    """"key: value" lines, for JSON objects an operator reads rather than parses."""
    return format_html_join(mark_safe("<br>"), "{}: {}", pairs)


class AttemptInline(admin.TabularInline):
    model = Attempt
    fields = ("number", "resource", "outcome", "started_at", "duration_ms", "category", "action", "error_signature")
    readonly_fields = fields
    extra = max_num = 0
    can_delete = False

    def get_queryset(self, request):
        return super().get_queryset(request).select_related("resource")  # one query, not one per attempt


class TaskEventInline(admin.TabularInline):
    model = TaskEvent
    fields = ("created_at", "kind", "attempt_number", "event_details")
    readonly_fields = fields
    extra = max_num = 0
    can_delete = False

    @admin.display(description=_("details"))
    def event_details(self, event):
        return _lines((key, _shown(value)) for key, value in mask_secrets(event.details).items())


# What an operator reads first on a task's page; the rest follows below them.
TASK_SUMMARY = ("state", "flow", "pool", "resource", "attempt_count", "next_run", "last_error",
                "last_error_signature", "last_error_category")


@admin.register(Task)
class TaskAdmin(TaskConsole, ReadOnlyAdmin):
    list_display = ("id", "flow", "pool", "state", "resource", "attempt_count", "next_run", "short_error")
    list_filter = ("state", FlowFilter, "pool", PolicyFilter, RetryOverdueFilter, NextRunFilter, TaskFailedWithFilter)
    list_select_related = ("pool", "resource")
    search_fields = ("=id", "idempotency_key", "resource__key", "last_error_signature")
    show_full_result_count = False
    readonly_fields = ("strict_mode", "next_run", "payload_shown", "result_shown")
    inlines = [AttemptInline, TaskEventInline]
    # Fields shown through a display method of their own, in the field's place.
    SHOWN_AS = {"strict": "strict_mode", "next_run_at": "next_run", "payload": "payload_shown",
                "result": "result_shown"}

    def get_fields(self, request, obj=None):
        fields = [f for f in super().get_fields(request, obj) if f not in self.SHOWN_AS.values()]
        return [self.SHOWN_AS.get(f, f) for f in fields]

    def get_fieldsets(self, request, obj=None):
        fields = self.get_fields(request, obj)
        summary = [f for f in TASK_SUMMARY if f in fields]
        return [(None, {"fields": summary}),
                (_("Request and history"), {"fields": [f for f in fields if f not in summary]})]

    @admin.display(description=_("last error"))
    def short_error(self, task):
        # A succeeded task's last error is history; its attempts keep it.
        return "" if task.state == TaskState.SUCCEEDED else truncatechars(task.last_error, 80)

    @admin.display(description=Task._meta.get_field("next_run_at").verbose_name, ordering="next_run_at")
    def next_run(self, task):
        # A task that runs or has ended keeps the time it was last due: shown as its next run, a
        # dead task would read as scheduled.
        # Formatted here: a read-only method's value is shown as str(), not as a date.
        return display_for_value(task.next_run_at if task.state in WAITING_STATES else None,
                                 self.get_empty_value_display())

    payload_shown = masked_json_display("payload", description=Task._meta.get_field("payload").verbose_name)
    result_shown = masked_json_display("result", description=Task._meta.get_field("result").verbose_name)

    @admin.display(description=_("strict"))
    def strict_mode(self, task):
        # Strict means "only on the requested resource"; without one there is nothing to be strict about.
        if task.requested_resource_id is None:
            return gettext("n/a (no resource requested)")
        return gettext("yes") if task.strict else gettext("no")


@admin.register(Attempt)
class AttemptAdmin(ReadOnlyAdmin):
    list_display = ("task", "number", "resource", "outcome", "scheduled_for", "started_at", "duration_ms", "category",
                    "error_signature")
    list_filter = ("outcome", "category", AttemptPolicyFilter, RetryStartFilter, ScheduledForFilter, FailedWithFilter)
    list_select_related = ("task", "resource")
    search_fields = ("=task__id", "resource__key", "error_signature")
    show_full_result_count = False


class PatternListField(StorableJSONField):
    widget = forms.Textarea(attrs={"rows": 4, "cols": 80})

    def __init__(self, **kwargs):
        # A declared field takes no initial value from the model's default either: a new policy's
        # list would show as "null".
        super().__init__(**{"initial": list, **kwargs})


def _label(model, field: str):
    return model._meta.get_field(field).verbose_name


class RetryPolicyForm(forms.ModelForm):
    # A declared field takes no label from the model field it replaces: named here.
    retryable_error_patterns = PatternListField(
        required=False, label=_label(RetryPolicy, "retryable_error_patterns"),
        help_text=_('["regex", {"pattern": "…", "action": "retry_other_resource"}]'))
    non_retryable_error_patterns = PatternListField(required=False,
                                                    label=_label(RetryPolicy, "non_retryable_error_patterns"))

    class Meta:
        model = RetryPolicy
        fields = ["name", "description", "max_attempts", "backoff", "initial_delay_seconds", "multiplier",
                  "max_delay_seconds", "retryable_error_patterns", "non_retryable_error_patterns",
                  "same_resource_on_retry", "deadline_seconds", "probation_cooldown_seconds"]

    def clean(self):
        data = super().clean()
        if self.errors:
            return data
        for field in ("retryable_error_patterns", "non_retryable_error_patterns"):
            data[field] = data.get(field) or []
        values = {"name": self.instance.name, **data}  # the name is read-only once the policy exists
        if self.instance.pk:
            # Saved are only the fields changed on the page, over the policy as it is now (another
            # editor may have changed other fields since the page was read): checked as that whole.
            values = {"name": self.instance.name, **policy_snapshot(self.instance),
                      **{field: data[field] for field in self.changed_data if field in POLICY_FIELDS}}
        try:
            self.cleaned_policy = clean_policy({k: v for k, v in values.items() if v is not None or k == "deadline_seconds"})
        except BadPolicy as exc:
            field = exc.details.get("field", "").split("[")[0]
            raise forms.ValidationError({field: str(exc)} if field in self.Meta.fields else str(exc)) from None
        return data


class RetryPolicyChangeInline(admin.TabularInline):
    model = RetryPolicyChange
    fields = ("changed_at", "changed_by", "diff")
    readonly_fields = fields
    extra = max_num = 0
    can_delete = False

    @admin.display(description=_("changed fields"))
    def diff(self, change):
        # In the form's order: jsonb keeps keys sorted by length, which reads as no order at all.
        keys = sorted((k for k in change.after if change.before.get(k) != change.after.get(k)), key=_form_position)
        return _lines((k, f"{_shown(change.before[k]) if k in change.before else '—'} → {_shown(change.after[k])}")
                      for k in keys)


def _form_position(field: str) -> int:
    fields = RetryPolicyForm.Meta.fields
    return fields.index(field) if field in fields else len(fields)


# The change form's "Preview the effect" button, and the days it replays (scheduling.whatif).
PREVIEW, PREVIEW_DAYS = "_preview", "_preview_days"


class PreviewOnly:
    """The policy form as "Preview the effect" posts it: validated exactly as Save validates it,
    then reported invalid (without an error) so that the admin saves nothing and shows the
    edited values again, with the what-if beside them."""

    def is_valid(self) -> bool:
        self.preview_ready = super().is_valid()
        return False


@admin.register(RetryPolicy)
class RetryPolicyAdmin(TransienceConsole, EditsWhatThePageShowed, admin.ModelAdmin):
    form = RetryPolicyForm
    fields = RetryPolicyForm.Meta.fields  # the name first, also when it is read-only
    list_display = ("name", "max_attempts", "backoff", "initial_delay_seconds", "max_delay_seconds",
                    "same_resource_on_retry", "deadline_seconds", "updated_at")
    inlines = [RetryPolicyChangeInline]

    def get_readonly_fields(self, request, obj=None):
        return ("name",) if obj else ()

    @staticmethod
    def previewing(request) -> bool:
        return request.method == "POST" and PREVIEW in request.POST

    def get_form(self, request, obj=None, change=False, **kwargs):
        form = super().get_form(request, obj, change=change, **kwargs)
        if change and self.previewing(request):
            return type(form.__name__, (PreviewOnly, form), {})
        return form

    def render_change_form(self, request, context, add=False, change=False, form_url="", obj=None):
        form = context["adminform"].form
        context["whatif_days"] = request.POST.get(PREVIEW_DAYS, whatif.DEFAULT_DAYS)
        if change and getattr(form, "preview_ready", False):
            try:
                days = int(context["whatif_days"])
            except ValueError:
                days = context["whatif_days"]  # what_if names it
            try:
                context["whatif"] = whatif.what_if(policy=obj.name, proposed=form.cleaned_policy, days=days)
                context["expected_note"] = whatif.EXPECTED_NOTE
            except DomainError as exc:
                self.message_user(request, str(exc), messages.ERROR)
        return super().render_change_form(request, context, add=add, change=change, form_url=form_url, obj=obj)

    def save_model(self, request, obj, form, change):
        fields = [field for field in form.changed_data if field in POLICY_FIELDS] if change else None
        saved = services.save_retry_policy(data=form.cleaned_policy, actor=request.user.get_username(), fields=fields)
        obj.pk = saved.pk

    def changeform_view(self, request, object_id=None, form_url="", extra_context=None):
        try:
            return super().changeform_view(request, object_id, form_url, extra_context)
        except BadPolicy as exc:
            # Another editor's change, made between the form's check and the save, made this one invalid.
            self.message_user(request, str(exc), messages.ERROR)
            return HttpResponseRedirect(request.get_full_path())

    def has_delete_permission(self, request, obj=None):
        return False  # tasks refer to their policy; change it instead


class BatchConfigForm(forms.ModelForm):
    retryable_error_patterns = PatternListField(required=False, label=_label(BatchConfig, "retryable_error_patterns"),
                                                help_text='["timeout", "HTTP 5\\\\d\\\\d"]')

    class Meta:
        model = BatchConfig
        fields = "__all__"
        exclude = ["last_tick_at", "last_error"]  # the ticks' own
        field_classes = {"payload": StorableJSONField}

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.instance.pk is not None:  # shown masked; save_batch_config keeps what comes back masked
            self.initial["payload"] = mask_secrets(self.instance.payload)

    def clean_payload(self):
        # run_batches hands this to start_task for every task: refuse here what would fail there.
        payload = storable_json_object(self.cleaned_data.get("payload"), name="payload")
        if self.instance.pk is None:
            return payload
        return refuse_unknown_masks(payload, self.instance.payload, name="payload")

    def clean_retryable_error_patterns(self):
        patterns = self.cleaned_data.get("retryable_error_patterns") or []
        if not isinstance(patterns, list) or not all(isinstance(p, str) for p in patterns):
            raise forms.ValidationError(_("a list of regexes, as strings"))
        try:
            clean_patterns("retryable_error_patterns", patterns)
        except BadPolicy as exc:
            raise forms.ValidationError(str(exc)) from None
        return patterns

    def clean_flow(self):
        from scheduling.flows import get_flow

        try:
            get_flow(self.cleaned_data["flow"])
        except FlowNotFound as exc:
            raise forms.ValidationError(str(exc)) from None
        return self.cleaned_data["flow"]


@admin.register(BatchConfig)
class BatchConfigAdmin(MaskedWhenReadOnly, EditsWhatThePageShowed, admin.ModelAdmin):
    form = BatchConfigForm
    SHOWN_MASKED = {"payload": "payload_shown"}
    list_display = ("name", "pool", "flow", "policy", "enabled", "tasks_per_tick", "retry_failed_first",
                    "recent_window_seconds", "last_tick_at")
    list_filter = ("enabled", "retry_failed_first")
    list_select_related = ("pool", "policy")
    readonly_fields = ("last_tick_at", "last_error")
    payload_shown = masked_json_display("payload", description=BatchConfig._meta.get_field("payload").verbose_name)

    def has_delete_permission(self, request, obj=None):
        return False  # a deletion would leave no audit entry; switching it off (enabled) is audited

    def save_model(self, request, obj, form, change):
        # A batch tick writes last_tick_at meanwhile: a change writes only the fields typed in.
        saved = services.save_batch_config(data=edited_fields(form) if change else dict(form.cleaned_data),
                                           actor=request.user.get_username(), config=obj.pk if change else None)
        obj.pk = saved.pk


from scheduling import admin_events  # noqa: E402, F401  (the task events list: its own module)
