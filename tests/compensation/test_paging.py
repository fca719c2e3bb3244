"""The whole loop: retries exhausted -> dead letter -> work order -> the on-call paged on Slack and
PagerDuty (a real local HTTP server) -> compensated -> the page resolved with the same dedup key."""

import pytest

from compensation.jobs import dead_letters_job
from compensation.models import DeadLetter
from compensation.notifications.services import send_due_notifications, work_order_dedup_key
from compensation.work_orders import services
from scheduling import services as scheduling
from tests.compensation.notify_fixtures import (
    PAGERDUTY_PATH,
    SLACK_PATH,
    accept,
    bodies,
    pagerduty_event_validator,
)
from tests.scheduling.helpers import work

pytestmark = pytest.mark.django_db(transaction=True)


def die(pool, n=1):
    """Run n tasks of a flow that keeps failing until their retries are exhausted."""
    for _ in range(n):
        scheduling.start_task(flow="until_fixed", pool_name=pool, created_by="shop", policy="instant")
    work()
    dead_letters_job()
    return list(DeadLetter.objects.select_related("work_order").order_by("id"))


def test_exhausted_retries_page_the_on_call_with_the_work_orders_dedup_key(redis_conn, alice, instant_policy,
                                                                             both_channels):
    accept(both_channels)
    [letter] = die(alice.pool)
    send_due_notifications()
    key = work_order_dedup_key(letter.work_order_id)
    [trigger] = bodies(both_channels, PAGERDUTY_PATH)
    pagerduty_event_validator().validate(trigger)
    assert (trigger["event_action"], trigger["dedup_key"]) == ("trigger", key)
    assert "until_fixed" in trigger["payload"]["summary"]
    [slack] = bodies(both_channels, SLACK_PATH)
    assert key in str(slack) and "until_fixed" in slack["text"]


def test_a_burst_of_deaths_of_one_signature_pages_once(redis_conn, pool, instant_policy, pagerduty_only):
    from tests.factories import ResourceFactory

    accept(pagerduty_only)
    ResourceFactory.create_batch(5, pool=pool)
    letters = die(pool, n=5)
    assert len({letter.work_order_id for letter in letters}) == 1
    send_due_notifications()
    assert [body["event_action"] for body in bodies(pagerduty_only, PAGERDUTY_PATH)] == ["trigger"]


def test_compensating_the_work_order_resolves_its_page(redis_conn, alice, instant_policy, pagerduty_only):
    accept(pagerduty_only)
    [letter] = die(alice.pool)
    send_due_notifications()
    services.acknowledge_work_order(work_order=letter.work_order_id, actor="dave")
    services.compensate_work_order(work_order=letter.work_order_id, actor="dave", resolution="refunded by hand")
    send_due_notifications()
    sent = bodies(pagerduty_only, PAGERDUTY_PATH)
    assert [(body["event_action"], body["dedup_key"]) for body in sent] == [
        ("trigger", work_order_dedup_key(letter.work_order_id)),
        ("resolve", work_order_dedup_key(letter.work_order_id))]
    for body in sent:
        pagerduty_event_validator().validate(body)


def test_a_manual_work_order_pages_too(pool, pagerduty_only):
    accept(pagerduty_only)
    order = services.open_work_order(title="Refund double charges", actor="dave", pool=pool)
    send_due_notifications()
    [trigger] = bodies(pagerduty_only, PAGERDUTY_PATH)
    assert trigger["dedup_key"] == work_order_dedup_key(order.pk)
