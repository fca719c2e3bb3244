import django.db.models.deletion
from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    # The index is built without locking out the writers: every task's start and end writes the table.
    atomic = False

    dependencies = [
        ('scheduling', '0013_late_outcome_event'),
    ]

    operations = [
        migrations.AddField(
            model_name='task',
            name='new_instance_of',
            field=models.ForeignKey(blank=True, db_index=False, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='scheduling.task', verbose_name='new instance of'),
        ),
        AddIndexConcurrently(
            model_name='task',
            index=models.Index(condition=models.Q(('new_instance_of__isnull', False)), fields=['new_instance_of'], name='task_new_instance_of_idx'),
        ),
    ]
