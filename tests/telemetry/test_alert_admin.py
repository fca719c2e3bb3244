"""The alerts in the admin: every console group reads the list and each alert's history, in
English and in Chinese; nobody changes them there."""

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from compensation.notifications.models import Notification
from telemetry.alerts.services import evaluate_alert
from telemetry.alerts.models import Alert
from tests.retryops.conftest import logged_in, member
from tests.telemetry.conftest import open_dead_letters, settle_dead_letters

pytestmark = pytest.mark.django_db

ALERTS = reverse("admin:telemetry_alert_changelist")
EVENTS = reverse("admin:telemetry_alertevent_changelist")
CHINESE = {"HTTP_ACCEPT_LANGUAGE": "zh-hans"}


@pytest.fixture
def viewer(console_groups):
    return logged_in(member("vera", "viewers"))


@pytest.fixture
def fired(levels, no_channels) -> Alert:
    """The DLQ alert fired and resolved, then fired again."""
    now = timezone.now()
    open_dead_letters(11)
    evaluate_alert(rule="dlq_length", now=now)
    settle_dead_letters(0)
    evaluate_alert(rule="dlq_length", now=now + timedelta(seconds=1))
    evaluate_alert(rule="dlq_length", now=now + timedelta(seconds=61))
    open_dead_letters(12)
    evaluate_alert(rule="dlq_length", now=now + timedelta(seconds=90))
    evaluate_alert(rule="retry_failure_rate", now=now + timedelta(seconds=90))
    return Alert.objects.get(rule="dlq_length")


def test_a_viewer_sees_each_alert_with_its_state_value_and_levels(viewer, fired):
    page = viewer.get(ALERTS).content.decode()

    assert "Dead-letter queue length" in page and "Firing" in page
    assert '<td class="field-value_shown">12</td>' in page
    assert '<td class="field-threshold_shown">10</td>' in page and '<td class="field-clear_level_shown">8</td>' in page
    assert "Retry failure rate" in page and '<td class="field-threshold_shown">15.0%</td>' in page


def test_the_alert_list_speaks_chinese(viewer, fired):
    page = viewer.get(ALERTS, **CHINESE).content.decode()

    assert "死信队列长度" in page and "告警中" in page and "重试失败率" in page and "正常" in page


def test_an_alerts_page_shows_its_history_newest_first(viewer, fired):
    page = viewer.get(reverse("admin:telemetry_alert_change", args=[fired.pk])).content.decode()

    history = page[page.index("<table><thead>"):]
    assert history.index("12 open dead letters") < history.index("0 open dead letters") < history.index(
        "11 open dead letters")
    assert f"?subject_type__exact=alert&amp;subject_id={fired.pk}" in page


def test_the_history_list_filters_by_alert(viewer, fired):
    page = viewer.get(EVENTS, {"alert__id__exact": fired.pk}, **CHINESE).content.decode()

    assert page.count('<td class="field-kind_badge">') == 3
    assert "已触发" in page and "已恢复" in page


def test_a_staff_user_in_no_group_cannot_see_the_alerts(console_groups, fired):
    client = logged_in(member("stan"))

    assert client.get(ALERTS).status_code == 403
    assert client.get(EVENTS).status_code == 403


def test_not_even_a_superuser_changes_an_alert_in_the_admin(fired):
    client = logged_in(member("root", superuser=True))
    change = reverse("admin:telemetry_alert_change", args=[fired.pk])

    client.post(change, {"state": "ok"})
    client.post(reverse("admin:telemetry_alert_delete", args=[fired.pk]), {"post": "yes"})

    assert Alert.objects.get(pk=fired.pk).state == "firing"
    assert client.get(reverse("admin:telemetry_alert_add")).status_code == 403


def test_the_notification_list_names_an_alert_as_what_a_notification_is_about(viewer, fired):
    page = viewer.get(reverse("admin:compensation_notification_changelist"),
                      {"subject_type__exact": "alert"}).content.decode()

    assert f"alert {fired.pk}" in page
    assert Notification.objects.filter(subject_type="alert").count() == 6
