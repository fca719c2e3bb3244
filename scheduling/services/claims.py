"""Which resource an attempt runs on, and what a failed claim means for the task."""

import resources.services
from resources.choices import FailureCategory, ResourceState
from resources.classification import Classification
from resources.errors import (
    LeaseMismatch,
    PoolExhausted,
    ResourceNotFound,
    ResourceUnavailable,
)
from resources.models import Resource
from scheduling.choices import PatternAction
from scheduling.models import Task
from retryops.errors import DomainError
from scheduling.policies import Verdict

# A probe's claim is its probe lease; once that is gone the probe has nothing to test.
PROBE_LEASE_GONE = "probe_lease_gone"

# The reasons a claim fails for good. Anything else (in use, failed, freed between the claim and
# its explanation, an empty pool) may pass before the next attempt, so it is retried.
FATAL_CLAIM_REASONS = frozenset({ResourceState.QUARANTINED, ResourceState.DONE, "missing", PROBE_LEASE_GONE})


def claim_for(task: Task) -> Resource:
    """The resource this attempt runs on: the task's held lease, else its pinned resource, else any."""
    if task.held_lease_token:
        try:
            return resources.services.extend_lease(resource=task.resource_id, lease_token=task.held_lease_token,
                                                   use=True)
        except (LeaseMismatch, ResourceNotFound):
            pass  # the hold ran out and was swept; claim the pinned resource again below
    if task.is_probe:
        # A probe runs only under the probe lease start_probes took. Swept, the resource went back
        # to quarantine, where an operator may have released it since: claiming it again would
        # make a plain lease of it and end a probe that tested nothing.
        raise ResourceUnavailable(
            f"the probe lease of {task.holder} on resource {task.resource_id or task.pinned_resource_id} is gone "
            f"(expired and swept); the probe ends without touching the resource",
            reason=PROBE_LEASE_GONE, resource_id=task.resource_id or task.pinned_resource_id)
    if task.pinned_resource_id:
        return resources.services.claim_by_id(resource_id=task.pinned_resource_id, holder=task.holder,
                                              strict=task.strict)
    return resources.services.claim_next(pool=task.pool_id, holder=task.holder)


def claim_failure_verdict(error: DomainError) -> Verdict:
    """What a failed claim means: only a quarantined, consumed or missing resource (or a gone
    probe lease) ends the task; every other reason is retried."""
    fatal = not isinstance(error, PoolExhausted) and getattr(error, "reason", "") in FATAL_CLAIM_REASONS
    category = FailureCategory.NON_RETRYABLE if fatal else FailureCategory.RETRYABLE
    action = PatternAction.DEAD_LETTER if fatal else PatternAction.RETRY_SAME_RESOURCE
    return Verdict(Classification(category, None, str(error)), action)
