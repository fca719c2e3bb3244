"""Task events: durable rows written in the transaction that makes them true, each also put on
the event stream; and the queue of dead tasks that the dead-letter step takes."""

from django.db import connection
from django.utils import timezone

from audit.models import EVENTS_STREAM
from audit.streaming import add_to_stream
from retryops.errors import DomainError
from scheduling.choices import TaskState
from scheduling.models import Task, TaskEvent


def emit(task: Task, kind: str, *, attempt_number: int | None = None, **details) -> None:
    """Record a task event in the current transaction, and its stream entry with it."""
    row = TaskEvent.objects.create(task=task, kind=kind, attempt_number=attempt_number, details=details)
    add_to_stream(stream=EVENTS_STREAM, event=kind, data={"id": row.pk, "task": task.pk, "kind": kind,
                  "attempt_number": attempt_number, "created_at": row.created_at, "details": details})


def claim_dead_tasks(*, limit: int, after: int = 0) -> list[Task]:
    """The dead tasks not collected yet (at most `limit`, oldest first, with ids above `after`:
    past those the consumer put back in this transaction), marked collected in the
    caller's transaction: call it inside the consumer's `transaction.atomic()`, make what each
    death needs, and commit. A consumer that crashes before it commits leaves them for the next
    claim; a task another claimer holds is skipped (SKIP LOCKED), not waited for, and is gone from
    the queue once that claimer commits (task_dead_uncollected_idx)."""
    if not connection.in_atomic_block:
        raise DomainError("claim_dead_tasks marks tasks collected: call it inside the consumer's transaction.atomic(), "
                          "so a crash before the commit leaves them uncollected", code="needs_transaction")
    # of=self: the pool and policy rows the consumer reads are not locked with the tasks.
    tasks = list(Task.objects.select_for_update(of=("self",), skip_locked=True)
                 .filter(state=TaskState.DEAD, collected_at__isnull=True, pk__gt=after).order_by("id")[:limit])
    Task.objects.filter(pk__in=[t.pk for t in tasks]).update(collected_at=timezone.now())
    return tasks


def leave_dead_tasks_uncollected(*, task_ids: list[int]) -> None:
    """Put claimed dead tasks back in the queue, in the caller's transaction: for a consumer that
    could not make what their deaths need and carries on with the others."""
    Task.objects.filter(pk__in=task_ids).update(collected_at=None)
