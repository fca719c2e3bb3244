"""The compensation console in Chinese (zh-hans): the browser's language picks the catalogue in
compensation/locale; services refuse in the operator's language at raise time, with the same code
and details; what is stored (a bulk replay's last refusal) stays English."""

from pathlib import Path

import pytest
from django.conf import settings
from django.template.loader import get_template
from django.urls import reverse
from django.utils import translation

from compensation.services.bulk_replay import run_bulk_replay, start_bulk_replay
from compensation.services.dead_letters import collect_dead_letters, discard_dead_letter
from compensation.services.replay import replay_dead_letter
from retryops.errors import IllegalTransition
from compensation.models import BulkReplay
from tests.compensation.conftest import dead_tasks

pytestmark = pytest.mark.django_db

CHINESE = {"HTTP_ACCEPT_LANGUAGE": "zh-hans"}


def chinese_page(client, url: str) -> str:
    response = client.get(url, **CHINESE)
    assert response.status_code == 200
    return response.content.decode()


def test_the_dead_letter_groups_page_speaks_chinese_to_a_chinese_browser(carol, order):
    page = chinese_page(carol, reverse("admin:compensation_deadletter_groups"))

    assert '<html lang="zh-hans"' in page
    assert "按流程和错误签名分组的待处理死信" in page
    assert "共 3 个待处理死信，按流程和错误签名分为 1 组" in page
    assert f"工单 {order.pk}</a> (待处理)" in page
    assert "批量重放这些死信" in page


def test_the_work_order_page_speaks_chinese_to_a_chinese_browser(carol, order):
    page = chinese_page(carol, reverse("admin:compensation_workorder_change", args=[order.pk]))

    assert f"<h2>工单 {order.pk}</h2>" in page
    assert "状态：<b>待处理</b>；尚无负责人。" in page
    assert "通知：死信 → 开单" in page
    assert "SLA 计时" in page and "运行手册执行与审批" in page
    assert ">确认</a>" in page  # the acknowledge transition's button


def test_the_dashboard_fragment_has_chinese_headings(admin_client):
    page = chinese_page(admin_client, reverse("ops_dashboard"))

    for heading in ("已排期的重试", "运行中的尝试", "死信队列", "未结工单", "RQ 队列", "RQ 工作进程"):
        assert heading in page


def test_a_refusal_is_said_in_the_operators_language_with_the_same_code_and_details(order):
    letter = order.dead_letters.order_by("id").first()
    discard_dead_letter(dead_letter=letter, actor="ops:carol", reason="a duplicate")

    with translation.override("zh-hans"), pytest.raises(IllegalTransition) as refused:
        replay_dead_letter(dead_letter=letter.pk, actor="ops:carol")

    assert str(refused.value) == f"无法重放死信 {letter.pk}：其状态为已丢弃；只有待处理的死信可以重放"
    assert refused.value.code == "illegal_transition"
    assert refused.value.details["from_state"] == "discarded"


def test_a_bulk_replays_refusal_is_kept_in_english_whatever_the_runners_language(pool, bob, instant_policy):
    # Their tasks named no resource: a same-resource replay refuses each one.
    dead_tasks(pool=pool, policy=instant_policy, n=2, signature="TimeoutError: slow")
    collect_dead_letters()
    bulk = start_bulk_replay(filter={"flow": "demo"}, actor="ops:carol", rate=500)

    with translation.override("zh-hans"):
        run_bulk_replay(bulk_replay=bulk)

    assert "the resource was removed" in BulkReplay.objects.get(pk=bulk.pk).last_error


@pytest.mark.parametrize("name", ["start.html", "change_form.html", "change_list.html"])
def test_the_bulk_replay_pages_are_the_compensation_apps_own_templates(name):
    origin = Path(get_template(f"admin/compensation/bulkreplay/{name}").origin.name)

    assert origin.is_relative_to(Path(settings.BASE_DIR) / "compensation" / "templates")
