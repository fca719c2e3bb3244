"""Scheduling's sentences in Chinese: a service's refusal is translated when it is raised for a
Chinese reader, and background work (the batch job, the periodic commands: in_stored_language)
stores its text untranslated whatever language is active."""

from io import StringIO

import pytest
from django.core.management import call_command
from django.utils import translation

from scheduling import services
from scheduling.errors import BadPolicy
from retryops.errors import IllegalTransition
from scheduling.jobs import batch_tick_job
from scheduling.models import BatchConfig
from tests.scheduling.admin.conftest import order_42

pytestmark = pytest.mark.django_db


def test_a_refused_run_now_is_explained_in_the_readers_language(alice, instant_policy):
    task = order_42(alice, policy="instant")
    services.cancel_task(task=task, actor="ops")

    with translation.override("zh-hans"), pytest.raises(IllegalTransition) as refusal:
        services.run_task_now(task=task, actor="ops")

    assert str(refusal.value) == (f"无法立即运行任务 {task.pk}：其状态为“已取消”；"
                                  f"只有待运行、已排期或等待重试的任务可以立即运行")
    assert (refusal.value.code, refusal.value.details["state"]) == ("illegal_transition", "cancelled")


def test_a_bad_policy_document_is_refused_in_the_readers_language(db):
    with translation.override("zh-hans"), pytest.raises(BadPolicy) as refusal:
        services.load_retry_policies(text="policies: [{name: x}]", source="p.yaml", actor="ops")

    assert str(refusal.value) == "p.yaml 第 1 行：policies[0] (x)：缺少字段 'max_attempts'"


@pytest.fixture
def broken_config(pool, instant_policy):
    """A config whose every tick fails: its payload is not a JSON object."""
    return BatchConfig.objects.create(name="broken", pool=pool, flow="demo", policy=instant_policy, payload=[1, 2],
                                      tasks_per_tick=1)


def test_the_batch_job_stores_a_ticks_error_untranslated_under_a_chinese_default(broken_config):
    with translation.override("zh-hans"):
        batch_tick_job()

    broken_config.refresh_from_db()
    assert broken_config.last_error == "payload must be a JSON object, got list"


def test_the_batch_command_stores_a_ticks_error_untranslated_under_a_chinese_default(broken_config):
    with translation.override("zh-hans"):
        call_command("run_batches", stdout=StringIO(), stderr=StringIO())

    broken_config.refresh_from_db()
    assert broken_config.last_error == "payload must be a JSON object, got list"
