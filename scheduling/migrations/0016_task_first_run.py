import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    """Task.repeats becomes Task.first_run: the column is renamed, its rows kept."""

    dependencies = [
        ('scheduling', '0015_dead_letter_queue'),
    ]

    operations = [
        migrations.RenameField(model_name='task', old_name='repeats', new_name='first_run'),
        migrations.AlterField(
            model_name='task',
            name='first_run',
            field=models.ForeignKey(blank=True, db_index=False, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='later_runs', to='scheduling.task', verbose_name='first run of this business instance'),
        ),
        # PostgreSQL's index follows the renamed column: only its name and the state change.
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL('ALTER INDEX task_repeats_idx RENAME TO task_first_run_idx',
                                  'ALTER INDEX task_first_run_idx RENAME TO task_repeats_idx'),
            ],
            state_operations=[
                migrations.RemoveIndex(model_name='task', name='task_repeats_idx'),
                migrations.AddIndex(
                    model_name='task',
                    index=models.Index(condition=models.Q(('first_run__isnull', False)), fields=['first_run'], name='task_first_run_idx'),
                ),
            ],
        ),
    ]
