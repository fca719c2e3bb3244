"""A small recorded history, built by hand, whose what-if counts are worked out on paper in
test_whatif.py. Every task was created a day ago; each attempt takes 1 s and the recorded retries
came 60 s after each failure (the policy's fixed backoff), so attempt 1 fails at 1 s, attempt 2
starts at 61 s and fails at 62 s, attempt 3 starts at 122 s.

    t1  timeout, success                       recovered after 1 retry
    t2  success                                succeeded at the first attempt
    t3  timeout, timeout, timeout              dead: all 3 attempts failed
    t4  "account banned"                       dead: non-retryable, its resource quarantined
    t5  timeout, timeout, success              recovered after 2 retries
    t6  timeout, then cancelled by an operator
"""

from datetime import timedelta

from django.utils import timezone

from resources.models import Resource
from scheduling.choices import TERMINAL_STATES
from scheduling.models import RetryPolicy, Task
from resources.signatures import error_signature
from tests.factories import (
    AttemptFactory,
    ResourceFactory,
    RetryPolicyFactory,
    TaskFactory,
)

TIMEOUT = ("TimeoutError", "read timed out")
BANNED = ("PermissionError", "account banned")
RETRY, QUARANTINE = "retry_same_resource", "quarantine"

HISTORY = {
    "t1": ("succeeded", [TIMEOUT, "ok"]),
    "t2": ("succeeded", ["ok"]),
    "t3": ("dead", [TIMEOUT, TIMEOUT, TIMEOUT]),
    "t4": ("dead", [BANNED]),
    "t5": ("succeeded", [TIMEOUT, TIMEOUT, "ok"]),
    "t6": ("cancelled", [TIMEOUT]),
}


def checkout_policy(**fields) -> RetryPolicy:
    """The policy the history ran under: 3 attempts, 60 s apart; timeouts retried, bans quarantined."""
    return RetryPolicyFactory(name="checkout", **{
        "max_attempts": 3, "backoff": "fixed", "initial_delay_seconds": 60, "max_delay_seconds": 60,
        "retryable_error_patterns": [{"pattern": "timed out", "action": RETRY, "probation": False}],
        "non_retryable_error_patterns": [{"pattern": "banned", "action": QUARANTINE, "probation": False}],
        **fields})


def record(policy: RetryPolicy, pool, steps: list, *, state: str, resource: Resource | None = None,
           created=None, outcome: str = "failed", verdict: tuple[str, str] | None = None) -> Task:
    """A task of `policy` with one attempt per step ("ok", or an (error class, message) failure),
    each on `resource` (a new one by default), timed as the module's docstring says."""
    created = created or timezone.now() - timedelta(days=1)
    resource = resource or ResourceFactory(pool=pool)
    ended = state in TERMINAL_STATES
    task = TaskFactory(policy=policy, pool=pool, state=state, attempt_count=len(steps),
                       next_run_at=None if ended else timezone.now(),
                       finished_at=created + timedelta(seconds=61 * len(steps)) if ended else None)
    Task.objects.filter(pk=task.pk).update(created_at=created)
    for n, step in enumerate(steps, start=1):
        started = created + timedelta(seconds=61 * (n - 1))
        fields = {"task": task, "number": n, "resource": resource, "started_at": started,
                  "finished_at": started + timedelta(seconds=1), "duration_ms": 1000}
        if step == "ok":
            AttemptFactory(outcome="succeeded", **fields)
            continue
        error_class, message = step
        category = "non_retryable" if "banned" in message else "retryable"
        category, action = verdict or (category, QUARANTINE if category == "non_retryable" else RETRY)
        AttemptFactory(outcome=outcome, error_class=error_class, error_message=message,
                       error_signature=error_signature(error_class, message), category=category, action=action,
                       **fields)
    return task


def build(pool, policy: RetryPolicy) -> dict[str, Task]:
    return {name: record(policy, pool, steps, state=state) for name, (state, steps) in HISTORY.items()}

