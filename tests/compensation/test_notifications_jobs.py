"""The send job: enqueued once the transaction that queued notifications commits, run by a
flow worker of the default queue, it sends them."""

import django_rq
import pytest
from django.conf import settings
from django.db import transaction
from rq import SimpleWorker

from compensation.notifications.jobs import send_notifications_job
from compensation.notifications.models import Notification
from tests.compensation.notify_fixtures import (
    PAGERDUTY_PATH,
    SLACK_PATH,
    bodies,
    closed_port_url,
    page,
)

pytestmark = pytest.mark.django_db(transaction=True)


def run_default_worker():
    django_rq.get_worker("default", worker_class=SimpleWorker).work(burst=True)


def test_notifications_are_sent_by_the_job_enqueued_after_commit(both_channels, redis_conn):
    both_channels.expect_request(PAGERDUTY_PATH).respond_with_json({"status": "success"}, status=202)
    both_channels.expect_request(SLACK_PATH).respond_with_data("ok")
    queue = django_rq.get_queue("default")

    with transaction.atomic():
        page(7)
        assert queue.count == 0
    assert queue.count == 1
    run_default_worker()

    assert set(Notification.objects.values_list("channel", "state")) == {("slack", "sent"), ("pagerduty", "sent")}
    assert bodies(both_channels, PAGERDUTY_PATH)[0]["dedup_key"] == "retryops/work_order/7"


def test_nothing_is_enqueued_when_every_channel_is_skipped(no_channels, redis_conn):
    page(7)

    assert django_rq.get_queue("default").count == 0


def test_job_reports_what_it_sent(pagerduty_only, redis_conn):
    pagerduty_only.expect_request(PAGERDUTY_PATH).respond_with_data("down", status=500)
    page(7)

    assert send_notifications_job() == {"sent": 0, "retrying": 1, "failed": 0, "skipped": 0}


def test_redis_down_never_breaks_the_caller_and_the_rows_wait_for_the_periodic_run(both_channels, monkeypatch,
                                                                                     caplog):
    nobody = closed_port_url().rsplit("/", 2)[0].replace("http://", "redis://")
    monkeypatch.setitem(settings.RQ_QUEUES["default"], "URL", f"{nobody}/0")

    with transaction.atomic():
        page(7)

    assert set(Notification.objects.values_list("state", flat=True)) == {"queued"}
    assert "notification send job not enqueued" in caplog.text
