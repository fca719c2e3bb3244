"""The resource console in Simplified Chinese for a browser that asks for it: the list's columns,
badges and filters, a resource's diagnosis and timeline, and a bulk action's refusals. The data
(keys, pools, failure reasons) is shown as it was stored."""

from django.urls import reverse

from resources import services
from tests.resources.admin.conftest import change_url, failed
from tests.resources.admin.test_bulk_actions import chosen, confirmed

CHINESE = {"HTTP_ACCEPT_LANGUAGE": "zh-CN,zh;q=0.9"}


def test_the_resource_list_names_its_columns_states_and_filters_in_chinese(viewer, list_url, pool):
    failed(pool, "carol@x", "TimeoutError: read timed out after 30s")

    page = viewer.get(list_url, **CHINESE).content.decode()

    assert "最近失败原因" in page and "连续失败" in page  # columns
    assert '<span class="console-badge" style="background:#e65100" title="">失败</span>' in page  # the state badge
    assert "最近一小时内" in page and "资源自身" in page  # the failed-within and diagnosis filters
    assert "TimeoutError: read timed out after 30s" in page  # the stored reason, as stored


def test_a_resource_page_explains_its_diagnosis_in_chinese(viewer, pool):
    resource = failed(pool, "carol@x")

    page = viewer.get(change_url(resource), **CHINESE).content.decode()

    assert "不确定：资源池中有 1 个资源在 15 分钟内最后一次失败于同一错误签名" in page


def test_a_bulk_reset_names_each_refusal_in_chinese(operator, list_url, pool, claimed_alice):
    stuck = failed(pool, "stuck@x")
    operator.post(list_url, chosen("reset_selected", stuck, claimed_alice), **CHINESE)

    page = operator.post(list_url, confirmed("reset_selected", stuck, claimed_alice), **CHINESE).content.decode()

    assert "重置：2 个中已完成 1 个" in page
    assert "无法重置 account alice@x：它当前的状态为使用中；只有失败或已用完状态的才可以" in page


def test_the_same_page_stays_english_for_an_english_browser(viewer, list_url, pool):
    failed(pool, "carol@x")

    page = viewer.get(list_url, HTTP_ACCEPT_LANGUAGE="en").content.decode()

    assert "last failure reason" in page and "最近失败原因" not in page


def test_a_timeline_shows_stored_reasons_as_stored_under_chinese_labels(viewer, alice):
    services.quarantine(resource=alice, actor="olga", reason="reported as stolen")

    page = viewer.get(reverse("admin:resources_resource_change", args=[alice.pk]), **CHINESE).content.decode()

    assert "<td>已隔离</td>" in page and "reported as stolen" in page
