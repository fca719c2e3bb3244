from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    # Built without locking out the writers: every attempt's start and end writes the table.
    atomic = False

    dependencies = [
        ('resources', '0006_claim_permission'),
        ('scheduling', '0009_attempt_retry_due_index'),
    ]

    operations = [
        AddIndexConcurrently(
            model_name='attempt',
            index=models.Index(condition=models.Q(('outcome__in', ['failed', 'abandoned'])), fields=['started_at'], name='attempt_failure_time_idx'),
        ),
    ]
