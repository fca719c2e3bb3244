"""The operator console's task pages (issue 9): "retry this resource" and "run a flow with a
specified resource", cancel and run now, and the retry buttons on the resource pages.

TaskConsole is mixed into the task's ModelAdmin (scheduling.admin) and mounts its views through
get_urls. RetryOnResourcePage adds the retry column, the "retry selected" action, the retry button
and the resource's attempts to the resource pages through their extension point: scheduling may
import resources, never the reverse, so the buttons live here.

Every view checks its permission itself (scheduling.retry_resource, cancel_task, run_task_now);
every write is one service call; a refusal is the service's own sentence."""

import logging

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import (
    Http404,
    HttpResponseNotAllowed,
    HttpResponseRedirect,
    JsonResponse,
)
from django.template.loader import render_to_string
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html
from django.utils.translation import gettext, ngettext, pgettext
from django.utils.translation import gettext_lazy as _

from resources.admin import ResourceAdmin, ResourcePageExtension
from resources.choices import ResourceState
from resources.models import Resource
from resources.selectors import get_resource, when
from retryops.errors import BadInput, DomainError
from retryops.masking import keep_masked_secrets, mask_secrets
from scheduling import services
from scheduling.choices import WAITING_STATES, TaskState
from scheduling.errors import TaskLive
from scheduling.forms import RetryResourceForm, TaskActionForm, retry_initial, shown_payload
from scheduling.models import Task
from scheduling.selectors import (
    attempts_on,
    get_task,
    last_task_on,
    resource_keys,
)

log = logging.getLogger(__name__)

RETRYABLE_ROWS = (ResourceState.FAILED, ResourceState.QUARANTINED)
# How many of a resource's attempts its page shows; the attempt list has the rest.
RESOURCE_PAGE_ATTEMPTS = 20


def _actor(request) -> str:
    return request.user.get_username()


def _has(request, codename: str) -> bool:
    return request.user.has_perm(f"scheduling.{codename}")


def retry_url(*, resource: Resource | int | None = None, task: Task | int | None = None) -> str:
    url = reverse("admin:scheduling_task_retry")
    if task is not None:
        return f"{url}?task={getattr(task, 'pk', task)}"
    if resource is not None:
        return f"{url}?resource={getattr(resource, 'pk', resource)}"
    return url


def _record(value: str | None) -> int | None:
    """A query-string id, or None when absent; 404 when it is not one."""
    if value in (None, ""):
        return None
    if not value.isascii() or not value.isdigit() or not 0 < int(value) < 2**63:
        raise Http404(gettext("%(value)r is not an id") % {"value": value})
    return int(value)


def task_retryable(task: Task) -> bool:
    """Whether a task's page offers "retry this resource": it ended without succeeding after a
    failure (dead, or cancelled during its retries). A waiting task is run now or cancelled
    instead; a retry beside it would be refused (task_live)."""
    return task.state == TaskState.DEAD or (task.state == TaskState.CANCELLED and bool(task.last_error))


# What an operator can do about a resource a strict retry cannot have, by the reason
# describe_unavailability gives; a live task's refusal says it in its own sentence.
UNAVAILABLE_ADVICE = {
    "quarantined": _("A strict retry is refused until it is released from quarantine; with strict mode unchecked "
                     "the flow may run on another resource of the pool."),
    "in_use": _("A strict retry is refused until its holder releases it or the lease runs out; with strict mode "
                "unchecked the flow may run on another resource of the pool."),
}


def unavailable_advice(error: DomainError | None) -> str:
    return str(UNAVAILABLE_ADVICE.get(error.details.get("reason"), "")) if error is not None else ""


class TaskConsole:
    """Mixed into the task's ModelAdmin: the console's views, actions and change-page buttons."""

    change_form_template = "admin/scheduling/task/change_form.html"
    actions = ["cancel_selected", "run_selected_now"]

    def has_retry_resource_permission(self, request, obj=None) -> bool:
        return _has(request, "retry_resource")

    def has_cancel_task_permission(self, request, obj=None) -> bool:
        return _has(request, "cancel_task")

    def has_run_task_now_permission(self, request, obj=None) -> bool:
        return _has(request, "run_task_now")

    def get_urls(self):
        wrap = self.admin_site.admin_view
        return [
            path("retry/", wrap(self.retry_view), name="scheduling_task_retry"),
            path("retry/keys/", wrap(self.retry_keys_view), name="scheduling_task_retry_keys"),
            path("<int:task_id>/cancel/", wrap(self.cancel_view), name="scheduling_task_cancel"),
            path("<int:task_id>/run-now/", wrap(self.run_now_view), name="scheduling_task_run_now"),
            *super().get_urls(),
        ]

    def _context(self, request, title: str, **extra) -> dict:
        return {**self.admin_site.each_context(request), "opts": self.model._meta, "title": title, **extra}

    # "retry this resource" and "run a flow with a specified resource"

    def retry_view(self, request):
        if not self.has_retry_resource_permission(request):
            raise PermissionDenied
        task_id, resource_id = _record(request.GET.get("task")), _record(request.GET.get("resource"))
        source = resource = None
        try:
            if task_id is not None:
                source = get_task(task_id)
                # The resource its last attempt ran on, else the one it asked for; neither: the empty form.
                resource_id = source.resource_id or source.requested_resource_id
            if resource_id is not None:
                resource = get_resource(resource_id=resource_id)
                if source is None:
                    source = last_task_on(resource)
        except DomainError as exc:
            raise Http404(str(exc)) from None
        pool = source.pool if source else None
        form = None
        if request.method == "POST":
            form = RetryResourceForm(request.POST, resource=resource,
                                     initial=retry_initial(resource=resource, source=source, pool=pool))
            valid = form.is_valid()
            # The task whose payload the submitted page left out, as it carries it: what an empty
            # payload means, and what the page shown again is about, whatever the state is now.
            source = form.cleaned_data.get("left_out") or source
            if valid:
                task = self._start(request, form, source)
                if task is not None:
                    return HttpResponseRedirect(reverse("admin:scheduling_task_change", args=[task.pk]))
        # What a strict retry would meet, asked of the services before the page offers anything:
        # whether the resource can be had, then whether the source's payload would be refused.
        preview = services.preview_retry(resource=resource, source=source) if resource is not None else None
        refused = preview.instance_refused if preview is not None else None
        if form is None:
            form = RetryResourceForm(resource=resource, initial=retry_initial(resource=resource, source=source,
                                                                              pool=pool, with_payload=refused is None))
        left_out = (refused or gettext("a run of it was live or had succeeded when the page was opened")) \
            if form.payload_left_out and source is not None else None
        unavailable = preview.unavailable if preview is not None else None
        context = self._context(
            request, gettext("Retry this resource") if resource else gettext("Run a flow with a specified resource"),
            form=form, resource=resource, source=source,
            unavailable=str(unavailable or ""), unavailable_advice=unavailable_advice(unavailable),
            # A submit refused for what the page already says first is said there once.
            refused_as_said=unavailable is not None and str(unavailable) in form.non_field_errors(),
            left_out=str(left_out or ""), left_out_live=isinstance(left_out, TaskLive),
            source_payload=shown_payload(mask_secrets(source.payload)) if left_out is not None else "",
            keys_url=reverse("admin:scheduling_task_retry_keys"), media=self.media + form.media)
        return TemplateResponse(request, "admin/scheduling/task/retry_form.html", context)

    def _start(self, request, form: RetryResourceForm, source: Task | None) -> Task | None:
        """Start what the form says; `source` is the task whose flow and payload it was filled with."""
        data, resource = form.cleaned_data, form.resource
        policy = data["policy"].name if data["policy"] else None
        try:
            if source is not None and data["payload"] is None:
                # Left empty where the page left the source's payload out (its marker names the
                # source), "run it again as a new instance" ticked (RetryResourceForm.clean): that
                # payload, once more, as the guard allows now.
                data["payload"] = source.payload
            elif source is not None:  # the form showed the source's payload masked
                data["payload"] = keep_masked_secrets(data["payload"], source.payload, field="payload", error=BadInput)
            if data["strict"]:
                # Flow and payload kept as the source task's: the operator retries that task's
                # business instance, which the service refuses to run again where it runs or has
                # succeeded since, whichever task ran on the resource last. Changed: a new one.
                again = source is not None and (data["flow"], data["payload"]) == (source.flow, source.payload)
                what = {"instance": source} if again else {"flow": data["flow"], "payload": data["payload"]}
                task = services.retry_resource(resource=resource.pk, actor=_actor(request), policy=policy,
                                               idempotency_key=f"console-{data['token']}",
                                               as_new_instance=data["as_new_instance"], **what)
            else:
                task = services.retry_on_resource_or_another(
                    resource=resource.pk, actor=_actor(request), flow=data["flow"], payload=data["payload"],
                    policy=policy, instance=source, idempotency_key=f"console-{data['token']}",
                    as_new_instance=data["as_new_instance"])
        except DomainError as exc:
            form.add_refusal(exc)
            return None
        noun, key = resource.pool.resource_noun, resource.key
        if data["strict"]:
            text = gettext("Started task %(task)s (%(flow)s) on %(noun)s %(key)s, strict.")
        else:
            text = gettext("Started task %(task)s (%(flow)s), asking for %(noun)s %(key)s; it may run on another "
                           "resource of the pool.")
        self.message_user(request, text % {"task": task.pk, "flow": task.flow, "noun": noun, "key": key},
                          messages.SUCCESS)
        return task

    def retry_keys_view(self, request):
        """The key autocomplete: {"keys": [...]} of a pool, starting with what was typed."""
        if not self.has_retry_resource_permission(request):
            raise PermissionDenied
        if request.method != "GET":
            return HttpResponseNotAllowed(["GET"])
        try:
            keys = resource_keys(pool=_record(request.GET.get("pool")) or 0, prefix=request.GET.get("q", ""))
        except (DomainError, Http404) as exc:
            return JsonResponse({"error": str(exc)}, status=400)
        return JsonResponse({"keys": keys})

    # cancel and run now

    def cancel_view(self, request, task_id: int):
        if not self.has_cancel_task_permission(request):
            raise PermissionDenied
        return self._confirmed(request, task_id, verb=gettext("Cancel"), confirm=gettext("Yes, cancel it"),
                               with_reason=True,
                               question=gettext("Cancel task %(task)s? It never runs again, and a resource it holds "
                                                "goes back to the pool."),
                               call=lambda task, reason: services.cancel_task(task=task.pk, actor=_actor(request),
                                                                              reason=reason),
                               done=gettext("Cancelled task %(task)s."))

    def run_now_view(self, request, task_id: int):
        if not self.has_run_task_now_permission(request):
            raise PermissionDenied
        return self._confirmed(request, task_id, verb=gettext("Run now"), confirm=gettext("Yes, run it now"),
                               with_reason=False,
                               question=gettext("Run the next attempt of task %(task)s now instead of at %(when)s?"),
                               call=lambda task, reason: services.run_task_now(task=task.pk, actor=_actor(request)),
                               done=gettext("Task %(task)s runs now."))

    def _confirmed(self, request, task_id, *, verb, confirm, with_reason, question, call, done):
        """A confirmation page (GET) and the service call (POST), back on the task's page."""
        try:
            task = get_task(task_id)
        except DomainError as exc:
            raise Http404(str(exc)) from None
        form = TaskActionForm(request.POST if request.method == "POST" else None)
        if request.method == "POST" and form.is_valid():
            try:
                call(task, form.cleaned_data["reason"])
            except DomainError as exc:
                self.message_user(request, str(exc), messages.ERROR)
            else:
                self.message_user(request, done % {"task": task.pk}, messages.SUCCESS)
            return HttpResponseRedirect(reverse("admin:scheduling_task_change", args=[task.pk]))
        title = gettext("%(verb)s: task %(task)s") % {"verb": verb, "task": task.pk}
        context = self._context(request, title, task=task, form=form, with_reason=with_reason, verb=verb,
                                confirm=confirm, question=question % {"task": task.pk, "when": when(task.next_run_at)})
        return TemplateResponse(request, "admin/scheduling/task/action_confirmation.html", context)

    def _each(self, request, queryset, call, done: str) -> None:
        """One service call per selected task, each in its own transaction: one refusal (or a
        surprise) is reported and the others go ahead."""
        succeeded = []
        for task in queryset.order_by("id"):
            try:
                call(task)
            except DomainError as exc:
                self.message_user(request, str(exc), messages.ERROR)  # the services name the task
            except Exception as exc:
                log.exception("console action on %s failed", task)
                self.message_user(request, gettext("task %(task)s: %(error)s") % {
                    "task": task.pk, "error": f"{type(exc).__name__}: {exc}"}, messages.ERROR)
            else:
                succeeded.append(gettext("task %(task)s") % {"task": task.pk})
        if succeeded:
            tasks = pgettext("list separator", ", ").join(succeeded)
            self.message_user(request, done % {"count": len(succeeded), "tasks": tasks}, messages.SUCCESS)

    @admin.action(description=_("Cancel selected waiting tasks"), permissions=["cancel_task"])
    def cancel_selected(self, request, queryset):
        actor = _actor(request)
        # The reason is stored (audit entry, task event): untranslated, as all stored text.
        self._each(request, queryset, lambda task: services.cancel_task(
            task=task.pk, actor=actor, reason="cancelled from the task list"),
            gettext("Cancelled %(count)d: %(tasks)s."))

    @admin.action(description=_("Run selected waiting tasks now"), permissions=["run_task_now"])
    def run_selected_now(self, request, queryset):
        actor = _actor(request)
        self._each(request, queryset, lambda task: services.run_task_now(task=task.pk, actor=actor),
                   gettext("Running now %(count)d: %(tasks)s."))

    def render_change_form(self, request, context, add=False, change=False, form_url="", obj=None):
        if obj is not None:
            waiting = obj.state in WAITING_STATES
            context.update(
                # The page's heading and breadcrumb, in the reader's language (str(task) is what
                # audit entries store, so it stays as it is).
                subtitle=gettext("task %(task)s") % {"task": obj.pk},
                console_cancel_url=reverse("admin:scheduling_task_cancel", args=[obj.pk])
                if waiting and self.has_cancel_task_permission(request) else "",
                console_run_now_url=reverse("admin:scheduling_task_run_now", args=[obj.pk])
                if waiting and self.has_run_task_now_permission(request) else "",
                console_retry_url=retry_url(task=obj)
                if task_retryable(obj) and self.has_retry_resource_permission(request) else "",
            )
        return super().render_change_form(request, context, add=add, change=change, form_url=form_url, obj=obj)


class RetryOnResourcePage(ResourcePageExtension):
    """The resource pages' retry column, action, button and attempts panel."""

    def columns(self, request) -> list:
        return [retry_button] if _has(request, "retry_resource") else []

    def actions(self, request) -> list:
        return [retry_selected] if _has(request, "retry_resource") else []

    def buttons(self, request, resource) -> list[dict]:
        if not _has(request, "retry_resource"):
            return []
        return [{"url": retry_url(resource=resource.pk), "label": gettext("Retry this resource")}]

    def panel(self, request, resource) -> str:
        return render_to_string("admin/scheduling/resource/attempts.html", {
            "attempts": attempts_on(resource, limit=RESOURCE_PAGE_ATTEMPTS), "limit": RESOURCE_PAGE_ATTEMPTS,
            "all_attempts_url": f"{reverse('admin:scheduling_attempt_changelist')}?resource__id__exact={resource.pk}",
        }, request=request)


@admin.display(description=_("retry"))
def retry_button(resource):
    if resource.state not in RETRYABLE_ROWS:
        return ""
    if resource.state == ResourceState.QUARANTINED:
        return format_html('<a href="{}" title="{}">{} &#9888;</a>', retry_url(resource=resource.pk),
                           gettext("Quarantined: the form says why a strict retry is refused"),
                           gettext("Retry"))
    return format_html('<a href="{}">{}</a>', retry_url(resource=resource.pk), gettext("Retry"))


@admin.action(description=_("Retry selected resources (strict)"))
def retry_selected(modeladmin, request, queryset):
    resources = modeladmin.bulk_selection(request, queryset)
    if resources is None:
        return None
    if request.POST.get("post") != "yes":
        # Per resource, what the retry would do now, as the services would answer (availability
        # first, then the last task's payload): the confirmation promises nothing they refuse.
        rows = [{"resource": preview.resource, "last": preview.source, "refusal": str(preview.refusal or ""),
                 "advice": unavailable_advice(preview.unavailable),
                 "starts": preview.source is not None and preview.refusal is None}
                for preview in services.preview_retries(resources=list(resources))]
        starting = sum(row["starts"] for row in rows)
        title = ngettext("Retry %(count)d resource?", "Retry %(count)d resources?", len(rows)) % {
            "count": len(rows)}
        # Confirmed to the list without its filters, as the other bulk actions are: a resource
        # that left the filtered list meanwhile is still retried, or refused with its reason,
        # instead of dropping out of the selection unsaid.
        context = {**modeladmin.admin_site.each_context(request), "opts": modeladmin.model._meta, "title": title,
                   "rows": rows, "action_checkbox_name": admin.helpers.ACTION_CHECKBOX_NAME,
                   "outlook": gettext("%(start)d will start, %(refused)d will be refused.") % {
                       "start": starting, "refused": len(rows) - starting},
                   "none_starts": starting == 0,
                   "changelist_url": reverse("admin:resources_resource_changelist")}
        return TemplateResponse(request, "admin/scheduling/resource/retry_selected_confirmation.html", context)
    started, refused, actor = [], [], _actor(request)
    for resource in resources:
        try:
            started.append((resource, services.retry_resource(resource=resource.pk, actor=actor)))
        except DomainError as exc:
            refused.append((resource, str(exc)))
        except Exception as exc:  # one surprise must not stop the other retries
            log.exception("retry of resource %s failed", resource.pk)
            refused.append((resource, gettext("unexpected error: %(error)s") % {
                "error": f"{type(exc).__name__}: {exc}"}))
    # A page of its own, as reset and quarantine answer: which started as which task, and why
    # each other one was refused, one row each, instead of a sentence per refusal.
    title = gettext("Retry selected resources: %(done)d of %(count)d started") % {
        "done": len(started), "count": len(resources)}
    context = {**modeladmin.admin_site.each_context(request), "opts": modeladmin.model._meta, "title": title,
               "started": started, "refused": refused,
               "changelist_url": reverse("admin:resources_resource_changelist")}
    return TemplateResponse(request, "admin/scheduling/resource/retry_selected_result.html", context)


ResourceAdmin.extend(RetryOnResourcePage())
