"""The pool's refusals in the operator's language, translated when raised; their reason, code and
details, and everything stored, stay language-neutral."""

import pytest
from django.utils import translation

from resources import selectors, services
from resources.errors import ResourceUnavailable
from retryops.errors import IllegalTransition
from resources.models import ResourceEvent


def test_a_strict_claim_of_a_resource_in_use_is_refused_in_chinese_naming_the_holder(claimed_alice):
    with translation.override("zh-hans"), pytest.raises(ResourceUnavailable) as refused:
        services.claim_by_id(resource_id=claimed_alice.pk, holder="task 813")

    assert str(refused.value).startswith("account alice@x 正被 task 812 使用，直到 ")
    assert refused.value.reason == "in_use" and refused.value.code == "resource_unavailable"


def test_the_same_refusal_is_english_outside_a_chinese_request(claimed_alice):
    with pytest.raises(ResourceUnavailable, match="account alice@x is in use by task 812 until "):
        services.claim_by_id(resource_id=claimed_alice.pk, holder="task 813")


def test_a_refused_transition_lists_the_allowed_states_in_chinese(alice):
    with translation.override("zh-hans"), pytest.raises(IllegalTransition) as refused:
        services.reset(resource=alice, actor="olga")

    assert str(refused.value) == "无法重置 account alice@x：它当前的状态为可用；只有失败或已用完状态的才可以"
    assert refused.value.details == {"state": "available", "action": "reset", "resource_id": alice.pk}




def test_an_empty_pool_says_what_its_resources_are_doing_in_chinese(claimed_alice, bob):
    services.quarantine(resource=bob, actor="olga", reason="leaked")

    with translation.override("zh-hans"):
        exhausted = selectors.describe_exhaustion(claimed_alice.pool_id)

    assert str(exhausted) == "资源池 accounts 中没有可用的 account：使用中 1 个、已隔离 1 个"
    assert exhausted.details["counts"] == {"in_use": 1, "quarantined": 1}


def test_what_a_chinese_request_stores_stays_as_the_services_write_it(alice):
    with translation.override("zh-hans"):
        services.quarantine(resource=alice, actor="olga", reason="被盗")
        services.unquarantine(resource=alice, actor="olga")
        lease = services.claim_by_id(resource_id=alice.pk, holder="task 812")
        services.release(resource=alice, lease_token=lease.lease_token, outcome="failure",
                         error=TimeoutError("read timed out after 30s"))

    stored = list(ResourceEvent.objects.filter(resource=alice).order_by("id").values_list("kind", "reason"))
    assert stored == [("quarantined", "被盗"), ("unquarantined", ""), ("claimed", ""),
                      ("released_failure", "TimeoutError: read timed out after 30s")]
