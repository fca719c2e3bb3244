"""The SLA clocks of work orders and the DLQ by flow and signature."""

from datetime import timedelta

import pytest
from django.utils import timezone

from compensation.selectors import dead_letters_by_signature, sla_clocks
from compensation.services.dead_letters import collect_dead_letters
from compensation.work_orders.models import WorkOrder
from compensation.work_orders.services import acknowledge_work_order
from tests.compensation.conftest import dead_tasks

pytestmark = pytest.mark.django_db


def breached(order, **now) -> list[str]:
    return [clock.name for clock in sla_clocks(order, **now) if clock.breached]


def test_a_work_order_opened_within_the_notice_and_acknowledged_in_time_is_ok(pool, instant_policy):
    dead_tasks(pool=pool, policy=instant_policy)
    collect_dead_letters()
    order = acknowledge_work_order(work_order=WorkOrder.objects.get(), actor="ops:carol")
    notice, acknowledge, _compensate = sla_clocks(order)
    assert breached(order) == []
    assert 0 <= notice.seconds <= acknowledge.seconds


def test_a_work_order_nobody_acknowledges_breaches_while_it_waits(pool, instant_policy, settings):
    settings.RETRYOPS_SLA_ACKNOWLEDGE_SECONDS = 60
    dead_tasks(pool=pool, policy=instant_policy)
    collect_dead_letters()
    order = WorkOrder.objects.get()
    assert breached(order, now=order.created_at + timedelta(seconds=30)) == []
    assert breached(order, now=order.created_at + timedelta(seconds=61)) == ["acknowledge"]


def test_a_work_order_opened_after_the_notice_limit_breaches_the_notice(pool, instant_policy, settings):
    dead_tasks(pool=pool, policy=instant_policy)
    collect_dead_letters()
    order = WorkOrder.objects.get()
    order.first_dead_at = order.created_at - timedelta(seconds=settings.RETRYOPS_SLA_NOTICE_SECONDS + 1)
    assert "notice" in breached(order, now=timezone.now())


def test_the_dlq_is_counted_by_flow_and_signature(pool, instant_policy):
    dead_tasks(pool=pool, policy=instant_policy, n=3, signature="TimeoutError: slow")
    dead_tasks(pool=pool, policy=instant_policy, n=1, signature="PermissionError: HTTP 403")
    collect_dead_letters()
    rows = [(r["flow"], r["error_signature"], r["count"]) for r in dead_letters_by_signature()]
    assert rows == [("demo", "TimeoutError: slow", 3), ("demo", "PermissionError: HTTP 403", 1)]
