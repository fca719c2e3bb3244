"""The task events list: the rows the retry outcomes are counted from (task.retry.scheduled,
task.retry.succeeded, task.dead ...), read only, so that a figure made of them can link to them."""

from django.contrib import admin
from django.urls import reverse
from django.utils.html import format_html
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from audit.admin import CappedCountPaginator
from resources.admin import MaskedWhenReadOnly, masked_json_display
from retryops.display import short_time
from scheduling.admin import ReadOnlyAdmin
from scheduling.admin_filters import EventTimeFilter, RetryEndFilter
from scheduling.models import TaskEvent


@admin.register(TaskEvent)
class TaskEventAdmin(MaskedWhenReadOnly, ReadOnlyAdmin):
    list_display = ("id", "created", "kind", "task_link", "attempt_number")
    list_display_links = ("id",)
    list_filter = ("kind", RetryEndFilter, EventTimeFilter)
    search_fields = ("=task__id",)
    fields = ("task", "kind", "attempt_number", "details", "created_at")
    # Millions of rows: no full count, and no foreign key drop-down on the page.
    show_full_result_count = False
    paginator = CappedCountPaginator
    raw_id_fields = ("task",)
    SHOWN_MASKED = {"details": "details_shown"}
    details_shown = masked_json_display("details", description=TaskEvent._meta.get_field("details").verbose_name)

    @admin.display(description=_("created at"), ordering="created_at")
    def created(self, event):
        return short_time(event.created_at)

    @admin.display(description=_("task"), ordering="task_id")
    def task_link(self, event):
        return format_html('<a href="{}">{}</a>', reverse("admin:scheduling_task_change", args=[event.task_id]),
                           gettext("task %(task)s") % {"task": event.task_id})
