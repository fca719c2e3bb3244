"""Retrying tasks by id (the operators' POST /internal/tasks/retry): each one a strict retry of the
resource the task last ran on (else the one it asked for) that runs the task's business instance
again, through the operator's retry of a resource (retry_resource), as the console's "retry this
resource" opened from a task's page does."""

import logging
from dataclasses import dataclass

from retryops.errors import BadInput, DomainError

from scheduling.models import Task
from scheduling.selectors import get_task
from scheduling.services.operator_retry import retry_resource
from scheduling.services.tasks import name_of

log = logging.getLogger(__name__)

# Ids in one request at the most: each is a transaction of its own, run while the caller waits.
MAX_TASKS = 100


@dataclass(frozen=True)
class TaskRetry:
    """What became of one task's retry: the new task, or why there is none."""

    task_id: int
    retry: Task | None = None
    error: DomainError | None = None


def retry_task(*, task: Task | int, actor: str, as_new_instance: bool = False) -> Task:
    """Run a task's business instance again, strictly, on the resource its last attempt ran on
    (else the one it asked for): that resource is reset if it failed and a new task holds it, in
    one transaction with retry_resource's audit entry. Refused as retry_resource refuses (the
    resource is unavailable, a task is live on it, the instance runs elsewhere or has succeeded,
    unless `as_new_instance` runs a succeeded one again as a new instance), and when the task has
    no resource to retry on (BadInput)."""
    source = get_task(task)
    resource = source.resource_id or source.requested_resource_id
    if resource is None:
        raise BadInput(f"{source.holder} has run on no resource and names none: there is no resource to retry it on "
                       f"strictly", field="task", task_id=source.pk)
    return retry_resource(resource=resource, actor=actor, instance=source, as_new_instance=as_new_instance)


def retry_tasks(*, tasks: list[int], actor: str, as_new_instance: bool = False) -> list[TaskRetry]:
    """retry_task for each id, in the order given, each in its own transaction: a refusal, or an
    error nobody expected (logged), is that id's outcome and the others are retried all the same."""
    actor = name_of(actor, field="actor", what="who asks for the retries")
    if not isinstance(tasks, list) or not 1 <= len(tasks) <= MAX_TASKS:
        raise BadInput(f"tasks must be a list of 1 to {MAX_TASKS} task ids, got {tasks!r}", field="tasks")
    if len(set(map(repr, tasks))) != len(tasks):
        raise BadInput("tasks names a task more than once: a retry of the same task twice would be refused",
                       field="tasks")
    outcomes = []
    for task_id in tasks:
        try:
            outcomes.append(TaskRetry(task_id=task_id, retry=retry_task(task=task_id, actor=actor,
                                                                        as_new_instance=as_new_instance)))
        except DomainError as exc:
            outcomes.append(TaskRetry(task_id=task_id, error=exc))
        except Exception as exc:  # one surprise must not stop the other retries
            log.exception("retry of task %s failed", task_id)
            outcomes.append(TaskRetry(task_id=task_id, error=DomainError(
                f"the retry of task {task_id} failed on the server ({type(exc).__name__}); nothing was started",
                code="internal_error")))
    return outcomes
