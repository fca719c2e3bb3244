"""The scheduling console in Chinese: the browser asks for zh-hans (LocaleMiddleware), the pages and
the services' refusals answer in it, and what is stored stays untranslated."""

from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.urls import reverse
from django.utils import translation

from audit.models import AuditEntry
from resources.models import Resource
from resources.selectors import when
from scheduling.models import Task
from tests.scheduling.admin.test_retry_form import RETRY, form_of, posted

ZH = {"HTTP_ACCEPT_LANGUAGE": "zh-hans"}


def test_the_retry_form_speaks_chinese_to_a_chinese_browser(carol, failed_alice, dead_order):
    page = carol.get(f"{RETRY}?resource={failed_alice.pk}", **ZH).content.decode()

    assert '<html lang="zh-hans"' in page
    assert "<title>重试此资源" in page
    for label in ("资源池", "键", "流程", "载荷", "重试策略", "严格模式"):
        assert f">{label}:</label>" in page, label
    assert "勾选：若资源失败则先重置" in page  # the strict box's help
    assert f'流程、载荷和策略取自<a href="{reverse("admin:scheduling_task_change", args=[dead_order.pk])}">' \
           f"任务 {dead_order.pk}</a>（已死亡）" in page


def test_the_retry_forms_new_instance_choice_speaks_chinese(carol, failed_alice, dead_order):
    page = carol.get(f"{RETRY}?resource={failed_alice.pk}", **ZH).content.decode()
    assert ">作为新实例再次运行:</label>" in page
    assert "使用新的幂等键，上游会再次执行" in page


def test_a_refused_retry_gives_its_reason_in_chinese(carol, waiting_order):
    alice = Resource.objects.get(pk=waiting_order.pinned_resource_id)
    form = form_of(carol.get(f"{RETRY}?resource={alice.pk}", **ZH))

    page = carol.post(f"{RETRY}?resource={alice.pk}", posted(form), **ZH).content.decode()

    with translation.override("zh-hans"):
        until, retry_at = when(alice.leased_until), when(waiting_order.next_run_at)
    assert (f"未启动任何任务：account alice@x 正被任务 {waiting_order.pk}（demo）使用，直到 {until}："
            f"它当前状态为“等待重试”，下次运行于 {retry_at}；现在重试会让它运行两次：请先立即运行该任务或将其取消") in page
    assert Task.objects.count() == 1


def test_a_refused_cancel_says_why_in_chinese(carol, dead_order):
    answer = carol.post(reverse("admin:scheduling_task_cancel", args=[dead_order.pk]), {"reason": ""}, **ZH)

    page = carol.get(answer.url, **ZH).content.decode()

    assert (f"无法取消任务 {dead_order.pk}：其状态为“已死亡”；只有待运行、已排期或等待重试的任务可以取消"
            in page)


def test_the_task_list_names_its_columns_and_actions_in_chinese(carol, waiting_order):
    page = carol.get(reverse("admin:scheduling_task_changelist"), **ZH).content.decode()

    for text in ("下次运行时间", "尝试次数", "最近错误", "取消所选的等待中任务", "立即运行所选的等待中任务", "等待重试"):
        assert text in page, text


def test_a_cancel_from_the_chinese_task_list_stores_its_reason_untranslated(carol, waiting_order):
    carol.post(reverse("admin:scheduling_task_changelist"),
               {"action": "cancel_selected", "index": 0, ACTION_CHECKBOX_NAME: [waiting_order.pk]}, **ZH)

    assert AuditEntry.objects.get(action="task.cancel").reason == "cancelled from the task list"
    assert waiting_order.events.get(kind="task.cancelled").details["reason"] == "cancelled from the task list"


def test_a_tasks_page_names_the_task_and_its_attempts_classification_in_chinese(carol, waiting_order):
    page = carol.get(reverse("admin:scheduling_task_change", args=[waiting_order.pk]), **ZH).content.decode()

    assert f"<h2>任务 {waiting_order.pk}</h2>" in page
    assert f"&rsaquo; 任务 {waiting_order.pk}\n</div>" in page  # the breadcrumb
    assert "可重试" in page and "在同一资源上重试" in page  # the failed attempt's category and action
