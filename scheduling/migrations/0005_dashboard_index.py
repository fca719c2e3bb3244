from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    # Built without locking out the writers: every attempt's end inserts task events.
    atomic = False

    dependencies = [
        ('scheduling', '0004_task_console_permissions'),
    ]

    operations = [
        AddIndexConcurrently(
            model_name='taskevent',
            index=models.Index(condition=models.Q(('attempt_number__gt', 1), ('kind__in', ['task.retry.succeeded', 'task.retry.scheduled', 'task.dead'])), fields=['created_at', 'kind'], name='task_event_retry_outcome_idx'),
        ),
    ]
