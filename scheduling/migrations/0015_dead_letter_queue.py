from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models

# Every dead task is collected already but those whose task.dead event the dead-letter consumer had
# not processed yet: those stay the queue, and the dead-letter step takes them (a task that has its
# dead letter or is a replay makes nothing again).
COLLECTED = """
    UPDATE scheduling_task t SET collected_at = COALESCE(t.finished_at, now())
    WHERE t.state = 'dead' AND NOT EXISTS (
        SELECT 1 FROM scheduling_taskevent e
        WHERE e.task_id = t.id AND e.kind = 'task.dead' AND NOT EXISTS (
            SELECT 1 FROM scheduling_taskeventdelivery d WHERE d.event_id = e.id AND d.consumer = 'dead_letters'))
"""


class Migration(migrations.Migration):
    # The index is built without locking out the writers: every task's start and end writes the table.
    atomic = False

    dependencies = [
        ('resources', '0009_event_time_by_statement'),
        ('scheduling', '0014_task_new_instance_of'),
    ]

    operations = [
        migrations.AddField(
            model_name='task',
            name='collected_at',
            field=models.DateTimeField(blank=True, null=True, verbose_name='collected at'),
        ),
        migrations.RunSQL(COLLECTED, migrations.RunSQL.noop),
        migrations.DeleteModel(
            name='TaskEventWatermark',
        ),
        migrations.DeleteModel(
            name='TaskEventDelivery',
        ),
        migrations.RenameIndex(
            model_name='taskevent',
            new_name='task_event_kind_xid_idx',
            old_name='task_event_claim_idx',
        ),
        AddIndexConcurrently(
            model_name='task',
            index=models.Index(condition=models.Q(('collected_at__isnull', True), ('state', 'dead')), fields=['id'], name='task_dead_uncollected_idx'),
        ),
    ]
