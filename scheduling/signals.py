"""The task events as Django signals, sent once the transaction that recorded them commits.
Receivers count and alert; they never change task state."""

from django.dispatch import Signal

from scheduling.choices import TaskEventKind

task_execution_failed = Signal()
task_retry_scheduled = Signal()
task_retry_succeeded = Signal()
task_dead = Signal()

BY_KIND = {
    TaskEventKind.EXECUTION_FAILED: task_execution_failed,
    TaskEventKind.RETRY_SCHEDULED: task_retry_scheduled,
    TaskEventKind.RETRY_SUCCEEDED: task_retry_succeeded,
    TaskEventKind.DEAD: task_dead,
}
