"""Notifications in the admin: a read-only list of what was sent, and "send again"."""

import pytest
from django.urls import reverse

from audit.models import AuditEntry
from compensation.notifications.models import Notification
from compensation.notifications.services import send_due_notifications
from tests.compensation.notify_fixtures import PAGERDUTY_PATH, page

pytestmark = pytest.mark.django_db
CHANGELIST = reverse("admin:compensation_notification_changelist")


@pytest.fixture
def failed_page(pagerduty_only):
    pagerduty_only.expect_request(PAGERDUTY_PATH).respond_with_data("invalid routing key", status=400)
    row = page(7)[0]
    send_due_notifications()
    pagerduty_only.clear()
    return Notification.objects.get(pk=row.pk)


def send_again(client, *ids):
    return client.post(CHANGELIST, {"action": "send_again", "_selected_action": [str(i) for i in ids]}, follow=True)


def test_list_shows_state_channel_event_dedup_key_attempts_and_last_error(admin_client, failed_page):
    response = admin_client.get(CHANGELIST)

    html = response.content.decode()
    for text in ("Failed", "pagerduty", "trigger", "retryops/work_order/7", "PagerDuty answered HTTP 400"):
        assert text in html


def test_send_again_queues_the_failed_notification_and_audits_it_once(admin_client, admin_user, failed_page):
    response = send_again(admin_client, failed_page.pk)

    assert "1 notification queued to send again." in response.content.decode()
    row = Notification.objects.get(pk=failed_page.pk)
    assert (row.state, row.attempts) == ("queued", 0)
    entry, = AuditEntry.objects.exclude(target_type="auth.user")  # the admin user's creation
    assert (entry.action, entry.actor, entry.channel) == ("notification.resend", admin_user.username, "admin")


def test_send_again_of_a_sent_notification_shows_why_and_changes_nothing(admin_client, pagerduty_only):
    pagerduty_only.expect_request(PAGERDUTY_PATH).respond_with_json({"status": "success"}, status=202)
    row = page(7)[0]
    send_due_notifications()

    response = send_again(admin_client, row.pk)

    assert (f"Only failed or skipped notifications can be sent again: {row.pk} is sent"
            in response.content.decode())
    assert Notification.objects.get(pk=row.pk).state == "sent"
    assert not AuditEntry.objects.exclude(target_type="auth.user").exists()


def test_notification_cannot_be_edited_in_the_admin(admin_client, failed_page):
    url = reverse("admin:compensation_notification_change", args=[failed_page.pk])

    page_html = admin_client.get(url).content.decode()
    response = admin_client.post(url, {"state": "sent"})

    assert 'name="_save"' not in page_html and "invalid routing key" in page_html
    assert response.status_code == 403
    assert Notification.objects.get(pk=failed_page.pk).state == "failed"
