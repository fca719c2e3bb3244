"""Which resource an attempt runs on, and what a failed claim means for the task."""

from resources import services as pool
from resources.choices import FailureCategory, ResourceState
from resources.classification import Classification
from resources.errors import (
    LeaseMismatch,
    PoolExhausted,
    ResourceError,
    ResourceNotFound,
)
from resources.models import Resource
from scheduling.choices import PatternAction
from scheduling.models import Task
from scheduling.policies import Verdict


def claim_for(task: Task) -> Resource:
    """The resource this attempt runs on: the task's held lease, else its pinned resource, else any."""
    if task.held_lease_token:
        try:
            return pool.extend_lease(resource=task.resource_id, lease_token=task.held_lease_token, use=True)
        except (LeaseMismatch, ResourceNotFound):
            pass  # the hold ran out and was swept; claim the pinned resource again below
    if task.pinned_resource_id:
        return pool.claim_by_id(resource_id=task.pinned_resource_id, holder=task.holder, strict=task.strict)
    return pool.claim_next(pool=task.pool_id, holder=task.holder)


def claim_failure_verdict(error: ResourceError) -> Verdict:
    # In use or an empty pool can pass; quarantined, consumed or missing will not.
    transient = isinstance(error, PoolExhausted) or getattr(error, "reason", "") == ResourceState.IN_USE
    category = FailureCategory.RETRYABLE if transient else FailureCategory.NON_RETRYABLE
    action = PatternAction.RETRY_SAME_RESOURCE if transient else PatternAction.DEAD_LETTER
    return Verdict(Classification(category, None, str(error)), action)
