from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    # Built without locking out the writers: every attempt's start and end writes the table.
    atomic = False

    dependencies = [
        ('scheduling', '0010_attempt_failure_time_idx'),
    ]

    operations = [
        AddIndexConcurrently(
            model_name='attempt',
            index=models.Index(condition=models.Q(('outcome__in', ['failed', 'abandoned'])), fields=['error_signature', 'started_at'], name='attempt_failure_signature_idx'),
        ),
    ]
