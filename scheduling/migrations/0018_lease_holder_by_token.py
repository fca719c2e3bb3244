from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models

# task_held_lease_unique is a partial unique index (Django's conditional UniqueConstraint), built
# here without locking out the writers as Django's AddConstraint would.
HELD_LEASE_UNIQUE = """
    CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS task_held_lease_unique ON scheduling_task (held_lease_token)
    WHERE held_lease_token IS NOT NULL
"""


class Migration(migrations.Migration):
    # Built without locking out the writers: every attempt's start and end writes both tables.
    atomic = False

    dependencies = [
        ('resources', '0009_event_time_by_statement'),
        ('scheduling', '0017_attempt_rollups'),
    ]

    operations = [
        AddIndexConcurrently(
            model_name='attempt',
            index=models.Index(condition=models.Q(('lease_token__isnull', False)), fields=['lease_token'], name='attempt_lease_token_idx'),
        ),
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunSQL(
                HELD_LEASE_UNIQUE, "DROP INDEX CONCURRENTLY IF EXISTS task_held_lease_unique")],
            state_operations=[migrations.AddConstraint(
                model_name='task',
                constraint=models.UniqueConstraint(condition=models.Q(('held_lease_token__isnull', False)), fields=('held_lease_token',), name='task_held_lease_unique'),
            )],
        ),
    ]
