from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    # Built without locking out the writers (as 0010): every attempt's start and end writes the
    # table, and a plain CREATE INDEX blocks them for the whole build (1.5 s per million attempts here).
    atomic = False

    dependencies = [
        ('resources', '0006_claim_permission'),
        ('scheduling', '0008_attempt_finished_xid'),
    ]

    operations = [
        AddIndexConcurrently(
            model_name='attempt',
            index=models.Index(condition=models.Q(('number__gt', 1)), fields=['scheduled_for', 'started_at'], name='attempt_retry_due_idx'),
        ),
    ]
