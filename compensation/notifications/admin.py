"""Notifications in the admin: what the on-call was told, what the receivers answered, and a
"send again" action for failed or skipped ones. Read-only otherwise: rows change only through
the sender and compensation.notifications.services.resend_notifications."""

from django.contrib import admin, messages
from django.template.defaultfilters import truncatechars
from django.utils.html import format_html
from django.utils.translation import gettext, ngettext
from django.utils.translation import gettext_lazy as _

from audit.admin import CappedCountPaginator, json_block
from compensation.notifications.models import (
    Notification,
    NotificationState,
    NotificationSubject,
)
from compensation.notifications.services import resend_notifications
from retryops.admin_filters import ReadOnlyAdmin
from retryops.errors import DomainError

STATE_COLOURS = {
    NotificationState.QUEUED: "#777",
    NotificationState.SENT: "#2e7d32",
    NotificationState.FAILED: "#c62828",
    NotificationState.SKIPPED: "#ef6c00",
}


@admin.register(Notification)
class NotificationAdmin(ReadOnlyAdmin):
    list_display = ("id", "created_at", "state_badge", "channel", "event", "dedup_key", "subject", "attempts",
                    "short_error", "last_status_code", "next_attempt_at", "sent_at")
    list_filter = ("state", "channel", "event", "subject_type")
    search_fields = ("=dedup_key", "=subject_id")
    show_full_result_count = False
    paginator = CappedCountPaginator
    actions = ["send_again"]
    fields = ("id", "created_at", "channel", "event", "dedup_key", "subject_type", "subject_id", "subject_label",
              "state", "attempts", "next_attempt_at", "last_attempt_at", "last_status_code", "last_error", "sent_at",
              "payload_shown")
    readonly_fields = fields

    def has_resend_permission(self, request):
        return request.user.has_perm("compensation.change_notification")

    @admin.action(description=_("Send again (failed or skipped)"), permissions=["resend"])
    def send_again(self, request, queryset):
        try:
            rows = resend_notifications(ids=list(queryset.values_list("pk", flat=True)),
                                        actor=request.user.get_username())
        except DomainError as exc:
            self.message_user(request, str(exc), messages.ERROR)
            return
        self.message_user(request, ngettext("%(count)d notification queued to send again.",
                                            "%(count)d notifications queued to send again.", len(rows)) % {
                                                "count": len(rows)}, messages.SUCCESS)

    @admin.display(description=_("state"), ordering="state")
    def state_badge(self, row):
        return format_html('<b style="color:{}">{}</b>', STATE_COLOURS.get(row.state, "#000"),
                           row.get_state_display())

    @admin.display(description=_("about"), ordering="subject_id")
    def subject(self, row):
        # The label is what the on-call was told (English, like the message); the id is named here.
        if row.subject_type == NotificationSubject.ALERT:
            return gettext("alert %(id)s") % {"id": row.subject_id}
        return gettext("work order %(id)s") % {"id": row.subject_id}

    @admin.display(description=_("last error"))
    def short_error(self, row):
        return truncatechars(row.last_error, 80)

    @admin.display(description=_("payload"))
    def payload_shown(self, row):
        return json_block(row.payload)
