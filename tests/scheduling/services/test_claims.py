"""Which resource an attempt runs on, and what a failed claim means for its task."""

import pytest

from resources.choices import FailureCategory
from resources.errors import PoolExhausted, ResourceUnavailable
from scheduling.choices import PatternAction
from scheduling.services.claims import claim_failure_verdict


@pytest.mark.parametrize("reason, category", [
    ("in_use", FailureCategory.RETRYABLE),
    ("failed", FailureCategory.RETRYABLE),
    # Freed between the claim and its explanation: the next attempt can have it.
    ("available", FailureCategory.RETRYABLE),
    ("lease_mismatch", FailureCategory.RETRYABLE),
    ("quarantined", FailureCategory.NON_RETRYABLE),
    ("done", FailureCategory.NON_RETRYABLE),
    ("missing", FailureCategory.NON_RETRYABLE),
])
def test_only_a_quarantined_consumed_or_missing_resource_kills_a_strict_task(reason, category):
    verdict = claim_failure_verdict(ResourceUnavailable(f"account r0 is {reason}", reason=reason, resource_id=1))
    assert verdict.category == category
    expected = PatternAction.RETRY_SAME_RESOURCE if category == FailureCategory.RETRYABLE else PatternAction.DEAD_LETTER
    assert verdict.action == expected


def test_an_exhausted_pool_is_retryable():
    verdict = claim_failure_verdict(PoolExhausted("pool accounts has no available account: 2 in use", pool="accounts", counts={"in_use": 2}))
    assert (verdict.category, verdict.action) == (FailureCategory.RETRYABLE, PatternAction.RETRY_SAME_RESOURCE)
