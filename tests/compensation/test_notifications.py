"""The notification services: queue in the caller's transaction, send what is due, retry with
backoff what a retry can help, keep failed and skipped rows visible, send again on request."""

import math
import os
import subprocess
import sys
import threading
import time
from datetime import timedelta

import pytest
from django.db import connections, transaction
from django.utils import timezone
from werkzeug import Response

from audit.models import AuditEntry
from compensation.notifications.models import Notification, NotificationState
from compensation.notifications.services import resend_notifications, send_due_notifications
from retryops.errors import BadInput, IllegalTransition, NotFound
from tests import servers
from tests.compensation.notify_fixtures import (
    PAGERDUTY_PATH,
    ROUTING_KEY,
    SLACK_PATH,
    accept,
    bodies,
    closed_port_url,
    make_due,
    page,
    pagerduty_event_validator,
    resolve,
)

pytestmark = pytest.mark.django_db


def state_of(channel: str, event: str = "trigger") -> Notification:
    return Notification.objects.get(channel=channel, event=event)


# queueing and sending


def test_opened_work_order_pages_slack_and_pagerduty_with_its_dedup_key(both_channels):
    accept(both_channels)
    page(7)

    assert send_due_notifications() == {"sent": 2, "retrying": 0, "failed": 0, "skipped": 0}

    pd, = bodies(both_channels, PAGERDUTY_PATH)
    pagerduty_event_validator().validate(pd)
    assert (pd["event_action"], pd["dedup_key"]) == ("trigger", "retryops/work_order/7")
    slack, = bodies(both_channels, SLACK_PATH)
    assert "Work order 7" in slack["text"]
    for channel, status in (("pagerduty", 202), ("slack", 200)):
        row = state_of(channel)
        assert (row.state, row.attempts, row.last_status_code) == (NotificationState.SENT, 1, status)
        assert row.sent_at is not None and row.next_attempt_at is None


def test_closed_work_order_resolves_the_page_with_the_same_dedup_key(both_channels):
    accept(both_channels)
    page(7)
    send_due_notifications()
    resolve(7)

    send_due_notifications()

    trigger, closing = bodies(both_channels, PAGERDUTY_PATH)
    pagerduty_event_validator().validate(closing)
    assert closing["event_action"] == "resolve" and closing["dedup_key"] == trigger["dedup_key"]


def test_a_notification_is_about_a_work_order_unless_it_says_an_alert(no_channels):
    [order_page, _] = page(7)
    [alert_page, _] = page(7, subject_type="alert", dedup_key="retryops/alert/dlq_length", subject_label="")

    assert (order_page.subject_type, order_page.subject_label) == ("work_order", "work order 7")
    assert (alert_page.subject_type, alert_page.subject_label) == ("alert", "alert 7")


def test_a_work_orders_notifications_leave_out_an_alerts_of_the_same_id(no_channels):
    from compensation.selectors import notifications_of
    from tests.factories import WorkOrderFactory

    order = WorkOrderFactory()
    mine = page(order.pk)
    page(order.pk, subject_type="alert", dedup_key="retryops/alert/dlq_length")

    assert {row.pk for row in notifications_of(order, limit=10)} == {row.pk for row in mine}


def test_routing_key_is_sent_but_never_stored(pagerduty_only):
    accept(pagerduty_only)
    row = page(7)[0]

    send_due_notifications()

    assert bodies(pagerduty_only, PAGERDUTY_PATH)[0]["routing_key"] == ROUTING_KEY
    assert ROUTING_KEY not in str(Notification.objects.get(pk=row.pk).payload)


def test_relative_link_points_at_the_public_url(pagerduty_only, settings):
    settings.RETRYOPS_PUBLIC_URL = "https://ops.example"

    row = page(7)[0]

    assert row.payload["links"][0]["href"] == "https://ops.example/admin/compensation/workorder/7/change/"
    assert row.payload["payload"]["source"] == "ops.example"


def test_unconfigured_channels_are_recorded_skipped_with_the_reason(no_channels, httpserver):
    rows = page(7)

    assert {(row.channel, row.state, row.last_error) for row in Notification.objects.all()} == {
        ("slack", "skipped", "RETRYOPS_SLACK_WEBHOOK_URL is not set"),
        ("pagerduty", "skipped", "RETRYOPS_PAGERDUTY_ROUTING_KEY is not set")}
    assert len(rows) == 2
    assert send_due_notifications()["sent"] == 0
    assert httpserver.log == []


def test_channel_unconfigured_after_queueing_is_skipped_at_send_time(both_channels, settings):
    accept(both_channels)
    page(7)
    settings.RETRYOPS_SLACK_WEBHOOK_URL = ""

    assert send_due_notifications() == {"sent": 1, "retrying": 0, "failed": 0, "skipped": 1}
    assert state_of("slack").last_error == "RETRYOPS_SLACK_WEBHOOK_URL is not set"


# retries


def test_server_error_is_retried_with_exponential_backoff(pagerduty_only, settings):
    settings.RETRYOPS_NOTIFY_RETRY_DELAY = 15
    pagerduty_only.expect_request(PAGERDUTY_PATH).respond_with_data("down", status=500)
    page(7)
    waits = []
    for _ in range(3):
        make_due()
        assert send_due_notifications()["retrying"] == 1
        row = state_of("pagerduty")
        waits.append((row.next_attempt_at - row.last_attempt_at).total_seconds())

    assert waits == [15, 30, 60]
    assert (row.state, row.attempts, row.last_status_code) == ("queued", 3, 500)
    assert "HTTP 500" in row.last_error


def test_a_retry_is_not_sent_before_its_backoff(pagerduty_only):
    pagerduty_only.expect_request(PAGERDUTY_PATH).respond_with_data("down", status=502)
    page(7)
    send_due_notifications()

    assert send_due_notifications() == {"sent": 0, "retrying": 0, "failed": 0, "skipped": 0}
    assert len(pagerduty_only.log) == 1


def test_rate_limited_send_waits_as_long_as_the_receiver_asks(pagerduty_only, settings):
    settings.RETRYOPS_NOTIFY_RETRY_DELAY = 15
    pagerduty_only.expect_request(PAGERDUTY_PATH).respond_with_data("slow down", status=429,
                                                                      headers={"Retry-After": "300"})
    page(7)

    send_due_notifications()

    row = state_of("pagerduty")
    assert (row.next_attempt_at - row.last_attempt_at).total_seconds() == 300
    assert row.last_status_code == 429


def test_notification_that_keeps_failing_ends_failed_and_visible(pagerduty_only, settings):
    settings.RETRYOPS_NOTIFY_MAX_ATTEMPTS = 3
    pagerduty_only.expect_request(PAGERDUTY_PATH).respond_with_data("down", status=503)
    page(7)
    outcomes = []
    for _ in range(3):
        make_due()
        outcomes.append(send_due_notifications())

    assert [o["retrying"] for o in outcomes] == [1, 1, 0] and outcomes[-1]["failed"] == 1
    row = state_of("pagerduty")
    assert (row.state, row.attempts, row.next_attempt_at) == ("failed", 3, None)
    assert row.last_error.startswith("gave up after 3 attempts: PagerDuty answered HTTP 503")
    make_due()
    assert send_due_notifications()["sent"] == 0 and len(pagerduty_only.log) == 3


def test_endpoint_down_is_retried_then_failed(pagerduty_only, settings):
    settings.RETRYOPS_NOTIFY_MAX_ATTEMPTS = 2
    settings.RETRYOPS_PAGERDUTY_URL = closed_port_url()
    page(7)

    send_due_notifications()
    row = state_of("pagerduty")
    assert (row.state, row.attempts, row.last_status_code) == ("queued", 1, None)
    assert "cannot reach PagerDuty" in row.last_error
    make_due()
    send_due_notifications()

    assert state_of("pagerduty").state == "failed"


def test_timeout_is_retried(pagerduty_only, settings):
    settings.RETRYOPS_NOTIFY_TIMEOUT = 0.2
    pagerduty_only.expect_request(PAGERDUTY_PATH).respond_with_handler(
        lambda request: time.sleep(0.5) or Response("late", status=202))
    page(7)

    assert send_due_notifications()["retrying"] == 1
    assert "did not answer within 0.2 s" in state_of("pagerduty").last_error


def test_bad_request_fails_at_once(pagerduty_only):
    pagerduty_only.expect_request(PAGERDUTY_PATH).respond_with_json(
        {"status": "invalid event", "errors": ["'routing_key' is invalid"]}, status=400)
    page(7)

    assert send_due_notifications()["failed"] == 1

    row = state_of("pagerduty")
    assert (row.state, row.attempts, row.last_status_code, row.next_attempt_at) == ("failed", 1, 400, None)
    assert "routing_key" in row.last_error


def test_an_unreachable_receiver_costs_one_try_per_run(both_channels, settings):
    settings.RETRYOPS_PAGERDUTY_URL = closed_port_url()
    both_channels.expect_request(SLACK_PATH).respond_with_data("ok")
    for work_order in (1, 2, 3):
        page(work_order)

    assert send_due_notifications() == {"sent": 3, "retrying": 1, "failed": 0, "skipped": 0}
    assert sorted(Notification.objects.filter(channel="pagerduty").values_list("attempts", flat=True)) == [0, 0, 1]


def test_resolve_waits_until_its_trigger_is_sent(pagerduty_only):
    answers = iter([Response("down", status=500), Response("{}", status=202), Response("{}", status=202)])
    pagerduty_only.expect_request(PAGERDUTY_PATH).respond_with_handler(lambda request: next(answers))
    page(7)
    send_due_notifications()
    resolve(7)

    assert send_due_notifications()["sent"] == 0
    make_due()
    assert send_due_notifications()["sent"] == 2

    assert [b["event_action"] for b in bodies(pagerduty_only, PAGERDUTY_PATH)] == ["trigger", "trigger", "resolve"]


# bad input


@pytest.mark.parametrize("field, value", [
    ("event", "acknowledge"),
    ("dedup_key", ""),
    ("dedup_key", "x" * 256),
    ("subject_id", -1),
    ("subject_id", "7"),
    ("subject_type", "incident"),
    ("summary", "a\x00b"),
    ("details", {"count": math.nan}),
    ("details", ["not", "an", "object"]),
    ("link", "javascript:alert(1)"),
    ("severity", "panic"),
])
def test_bad_input_is_refused_naming_the_field_and_nothing_is_queued(both_channels, field, value):
    with pytest.raises(BadInput) as caught:
        page(7, **{field: value})

    assert caught.value.code == "bad_input" and caught.value.details["field"] == field
    assert not Notification.objects.exists()


# send again


def failed_pages(server, count=1) -> list[int]:
    server.expect_request(PAGERDUTY_PATH).respond_with_data("bad", status=400)
    for work_order in range(1, count + 1):
        page(work_order)
    send_due_notifications()
    server.clear()
    return list(Notification.objects.filter(state="failed").order_by("id").values_list("pk", flat=True))


def test_resend_queues_failed_notifications_with_fresh_attempts_and_one_audit_entry(pagerduty_only):
    ids = failed_pages(pagerduty_only, count=2)

    rows = resend_notifications(ids=ids, actor="carol")

    assert [(r.state, r.attempts) for r in rows] == [("queued", 0), ("queued", 0)]
    entry, = AuditEntry.objects.all()
    assert (entry.action, entry.actor, entry.target_type) == ("notification.resend", "carol",
                                                             "compensation.notification")
    assert entry.target_id == ",".join(map(str, ids))
    assert {v["state"] for v in entry.before.values()} == {"failed"}
    accept(pagerduty_only)
    assert send_due_notifications()["sent"] == 2


def test_resend_of_a_skipped_notification_sends_it_once_the_channel_is_configured(no_channels, settings,
                                                                                 httpserver):
    accept(httpserver)
    row = page(7)[0]
    settings.RETRYOPS_PAGERDUTY_ROUTING_KEY = ROUTING_KEY
    settings.RETRYOPS_PAGERDUTY_URL = httpserver.url_for(PAGERDUTY_PATH)

    resend_notifications(ids=[row.pk], actor="carol")
    send_due_notifications()

    assert Notification.objects.get(pk=row.pk).state == "sent"


def test_resend_refuses_a_channel_that_is_still_not_configured(no_channels):
    row = page(7)[0]

    with pytest.raises(BadInput, match="RETRYOPS_PAGERDUTY_ROUTING_KEY is not set"):
        resend_notifications(ids=[row.pk], actor="carol")

    assert Notification.objects.get(pk=row.pk).state == "skipped"
    assert not AuditEntry.objects.exists()


def test_resend_refuses_a_sent_notification_and_changes_nothing(pagerduty_only):
    failed = failed_pages(pagerduty_only)[0]
    accept(pagerduty_only)
    sent = page(8)[0]
    send_due_notifications()

    with pytest.raises(IllegalTransition) as caught:
        resend_notifications(ids=[failed, sent.pk], actor="carol")

    assert caught.value.details["notifications"] == {sent.pk: "sent"}
    assert Notification.objects.get(pk=failed).state == "failed"
    assert not AuditEntry.objects.exists()


def test_resend_refuses_a_trigger_whose_incident_was_resolved_since(pagerduty_only):
    failed = failed_pages(pagerduty_only)[0]
    accept(pagerduty_only)
    resolved = resolve(1)[0]
    send_due_notifications()

    with pytest.raises(IllegalTransition, match=f"resolved since .*notification {resolved.pk}") as caught:
        resend_notifications(ids=[failed], actor="carol")

    assert caught.value.details["notifications"] == {failed: "failed"}
    assert Notification.objects.get(pk=failed).state == "failed"
    assert not AuditEntry.objects.exists()


def test_resend_refuses_unknown_ids(pagerduty_only):
    failed = failed_pages(pagerduty_only)[0]

    with pytest.raises(NotFound) as caught:
        resend_notifications(ids=[failed, failed + 1000], actor="carol")

    assert (caught.value.code, caught.value.details["ids"]) == ("notification_not_found", [failed + 1000])
    assert Notification.objects.get(pk=failed).state == "failed"


@pytest.mark.parametrize("kwargs, field", [
    ({"ids": [], "actor": "carol"}, "ids"),
    ({"ids": ["1"], "actor": "carol"}, "ids"),
    ({"ids": [1], "actor": " "}, "actor"),
])
def test_resend_bad_input_names_the_field(db, kwargs, field):
    with pytest.raises(BadInput) as caught:
        resend_notifications(**kwargs)

    assert caught.value.details["field"] == field


# concurrency and crashes


@pytest.mark.django_db(transaction=True)
def test_two_concurrent_senders_send_each_notification_once(threaded_receiver, settings):
    settings.RETRYOPS_SLACK_WEBHOOK_URL = threaded_receiver.url_for(SLACK_PATH)
    settings.RETRYOPS_PAGERDUTY_ROUTING_KEY = ROUTING_KEY
    settings.RETRYOPS_PAGERDUTY_URL = threaded_receiver.url_for(PAGERDUTY_PATH)
    threaded_receiver.expect_request(PAGERDUTY_PATH).respond_with_handler(
        lambda request: time.sleep(0.1) or Response("{}", status=202))
    threaded_receiver.expect_request(SLACK_PATH).respond_with_handler(
        lambda request: time.sleep(0.1) or Response("ok"))
    for work_order in range(1, 6):
        page(work_order)
    results = []

    def sender():
        try:
            results.append(send_due_notifications())
        finally:
            connections.close_all()

    threads = [threading.Thread(target=sender) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)

    received = [(request.path, request.get_json()["text" if request.path == SLACK_PATH else "dedup_key"])
                for request, _ in threaded_receiver.log]
    assert len(received) == len(set(received)) == 10
    assert sorted(r["sent"] for r in results) != [0, 10]  # both senders worked
    assert sum(r["sent"] for r in results) == 10
    assert set(Notification.objects.values_list("state", "attempts")) == {("sent", 1)}


SENDER = ("import django; django.setup(); "
          "from compensation.notifications.services import send_due_notifications as s; s()")


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_sender_killed_mid_send_leaves_the_notification_due(threaded_receiver, settings):
    settings.RETRYOPS_SLACK_WEBHOOK_URL = ""
    settings.RETRYOPS_PAGERDUTY_ROUTING_KEY = ROUTING_KEY
    settings.RETRYOPS_PAGERDUTY_URL = threaded_receiver.url_for(PAGERDUTY_PATH)
    arrived, release = threading.Event(), threading.Event()

    def hang_until_released(request):
        arrived.set()
        release.wait(10)
        return Response("{}", status=202)

    threaded_receiver.expect_request(PAGERDUTY_PATH).respond_with_handler(hang_until_released)
    row = page(7)[0]
    env = {**os.environ, "DATABASE_URL": servers.database_url(), "REDIS_URL": servers.redis_url(),
           "DJANGO_SETTINGS_MODULE": "retryops.settings", "RETRYOPS_SLACK_WEBHOOK_URL": "",
           "RETRYOPS_PAGERDUTY_ROUTING_KEY": ROUTING_KEY, "RETRYOPS_PAGERDUTY_URL": settings.RETRYOPS_PAGERDUTY_URL}
    sender = subprocess.Popen([sys.executable, "-c", SENDER], env=env)
    try:
        assert arrived.wait(30), "the sender never sent"
        sender.kill()
        sender.wait(10)
    finally:
        release.set()

    killed = Notification.objects.get(pk=row.pk)
    assert (killed.state, killed.attempts) == ("queued", 0)
    assert killed.next_attempt_at <= timezone.now()
    # PostgreSQL rolls the dead sender's transaction back once it sees the connection close.
    deadline = time.monotonic() + 10
    while send_due_notifications()["sent"] == 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert Notification.objects.get(pk=row.pk).state == "sent"
    assert len(threaded_receiver.log) == 2


def test_rolled_back_transaction_queues_nothing(both_channels):
    with pytest.raises(RuntimeError), transaction.atomic():
        page(7)
        raise RuntimeError("the work order could not be opened")

    assert not Notification.objects.exists()


def test_backoff_is_capped_at_an_hour(pagerduty_only, settings):
    settings.RETRYOPS_NOTIFY_RETRY_DELAY = 900
    settings.RETRYOPS_NOTIFY_MAX_ATTEMPTS = 10
    pagerduty_only.expect_request(PAGERDUTY_PATH).respond_with_data("down", status=500)
    page(7)
    for _ in range(4):
        make_due()
        send_due_notifications()

    row = state_of("pagerduty")
    assert row.next_attempt_at - row.last_attempt_at == timedelta(hours=1)


def test_a_retry_after_past_any_date_waits_an_hour_and_the_other_channels_are_still_sent(both_channels):
    both_channels.expect_request(PAGERDUTY_PATH).respond_with_data(
        "slow down", status=429, headers={"Retry-After": "99999999999999999"})
    both_channels.expect_request(SLACK_PATH).respond_with_data("ok")
    page(7)

    assert send_due_notifications() == {"sent": 1, "retrying": 1, "failed": 0, "skipped": 0}

    row = state_of("pagerduty")
    assert (row.state, row.next_attempt_at - row.last_attempt_at) == ("queued", timedelta(hours=1))
