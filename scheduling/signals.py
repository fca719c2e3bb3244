"""The task events as Django signals, sent once the transaction that recorded them commits.
In-process notifications only: a crash between the commit and the send loses them, so anything
that must see every event (dead letters, the event stream, alerts) claims the TaskEvent rows
with scheduling.services.claim_task_events instead. Receivers never change task state."""

from django.dispatch import Signal

from scheduling.choices import TaskEventKind

task_execution_failed = Signal()
task_retry_scheduled = Signal()
task_retry_succeeded = Signal()
task_dead = Signal()
task_cancelled = Signal()
task_run_now = Signal()
task_outcome_late = Signal()

BY_KIND = {
    TaskEventKind.EXECUTION_FAILED: task_execution_failed,
    TaskEventKind.RETRY_SCHEDULED: task_retry_scheduled,
    TaskEventKind.RETRY_SUCCEEDED: task_retry_succeeded,
    TaskEventKind.DEAD: task_dead,
    TaskEventKind.CANCELLED: task_cancelled,
    TaskEventKind.RUN_NOW: task_run_now,
    TaskEventKind.LATE_OUTCOME: task_outcome_late,
}
