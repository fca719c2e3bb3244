"""Tasks and their attempts: the only code that changes them. Jobs, commands and the admin call these.

A task's life: start_task writes it (and, for reserved resources, claims the resource in the
same transaction) and enqueues a job once that commits. The job calls scheduling.runner's
run_attempt: begin_attempt locks the task, checks that this delivery is the one due, claims the
resource and records the attempt; the flow runs outside any transaction; finish_attempt records
the outcome, releases or holds the resource, and schedules the retry or ends the task. The
database decides everything; Redis only carries wake-ups, which the dispatcher re-creates when
they are lost. An operator can cancel a waiting task (cancel_task) or run it now (run_task_now).
The dead-letter step takes the dead tasks not collected yet with claim_dead_tasks.

One module per use case; the public names are re-exported here. Reads live in scheduling.selectors.
"""

from scheduling.services.attempts import StartedAttempt, begin_attempt, finish_attempt
from scheduling.services.batches import (
    BatchTicks,
    run_batch,
    run_batches,
    save_batch_config,
)
from scheduling.services.events import claim_dead_tasks, leave_dead_tasks_uncollected
from scheduling.services.failures import ABANDONED_REASON, WorkerLost
from scheduling.services.operator_retry import (
    instance_to_run_again,
    replay_on_resource,
    retry_on_resource_or_another,
    retry_resource,
)
from scheduling.services.policies import (
    PolicyLoad,
    load_retry_policies,
    policy_snapshot,
    preview_retry_policies,
    save_retry_policy,
)
from scheduling.services.probes import start_probes
from scheduling.services.retry_preview import RetryPreview, preview_retries, preview_retry
from scheduling.services.recovery import (
    abandon_stopped_attempt,
    dispatch_waiting,
    recover_lost_attempts,
    run_dispatcher,
)
from scheduling.services.task_retry import TaskRetry, retry_task, retry_tasks
from scheduling.services.tasks import (
    cancel_task,
    parse_payload,
    run_task_now,
    start_replay,
    start_task,
)

__all__ = [
    "ABANDONED_REASON", "BatchTicks", "abandon_stopped_attempt", "StartedAttempt", "WorkerLost", "begin_attempt", "cancel_task",
    "claim_dead_tasks", "leave_dead_tasks_uncollected", "dispatch_waiting", "finish_attempt", "instance_to_run_again", "load_retry_policies",
    "PolicyLoad", "preview_retry_policies",
    "parse_payload", "policy_snapshot", "recover_lost_attempts", "replay_on_resource", "retry_on_resource_or_another", "retry_resource",
    "run_batch", "run_batches", "run_dispatcher", "run_task_now", "save_batch_config", "save_retry_policy", "start_probes", "start_replay", "start_task",
    "TaskRetry", "retry_task", "retry_tasks", "RetryPreview", "preview_retry", "preview_retries",
]
