"""Task events: durable rows written in the transaction that makes them true, plus in-process signals."""

from django.db import transaction

from scheduling.models import Task, TaskEvent
from scheduling.signals import BY_KIND


def emit(task: Task, kind: str, *, attempt_number: int | None = None, **details) -> None:
    TaskEvent.objects.create(task=task, kind=kind, attempt_number=attempt_number, details=details)
    signal = BY_KIND[kind]
    task_id = task.pk
    transaction.on_commit(
        lambda: signal.send(sender=Task, task_id=task_id, attempt_number=attempt_number, details=details), robust=True
    )
