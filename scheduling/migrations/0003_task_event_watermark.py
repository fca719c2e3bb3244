from django.db import migrations, models

import scheduling.models


class Migration(migrations.Migration):

    dependencies = [
        ('scheduling', '0002_task_hardening'),
    ]

    operations = [
        migrations.CreateModel(
            name='TaskEventWatermark',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('consumer', models.CharField(max_length=100)),
                ('kind', models.CharField(choices=[('task.execution.failed', 'Execution failed'), ('task.retry.scheduled', 'Retry scheduled'), ('task.retry.succeeded', 'Retry succeeded'), ('task.dead', 'Dead'), ('task.cancelled', 'Cancelled'), ('task.run_now', 'Run now (operator)')], max_length=40)),
                ('below_xid', scheduling.models.TransactionIdField()),
                ('advanced_at', models.DateTimeField(auto_now=True)),
            ],
            options={
                'ordering': ['consumer', 'kind'],
            },
        ),
        migrations.RemoveIndex(
            model_name='taskevent',
            name='task_event_kind_id_idx',
        ),
        # Events written before this migration all committed before it (adding the column waits for
        # their writers), so a constant 0 says "before every watermark" without rewriting the table;
        # new events get their writer's transaction id.
        migrations.AddField(
            model_name='taskevent',
            name='xid',
            field=scheduling.models.TransactionIdField(db_default=models.Value('0', output_field=scheduling.models.TransactionIdField()), editable=False),
        ),
        migrations.AlterField(
            model_name='taskevent',
            name='xid',
            field=scheduling.models.TransactionIdField(db_default=models.Func(function='pg_current_xact_id', output_field=scheduling.models.TransactionIdField()), editable=False),
        ),
        migrations.AddIndex(
            model_name='taskevent',
            index=models.Index(fields=['kind', 'xid', 'id'], name='task_event_claim_idx'),
        ),
        migrations.AddConstraint(
            model_name='taskeventwatermark',
            constraint=models.UniqueConstraint(fields=('consumer', 'kind'), name='task_event_watermark_once'),
        ),
        migrations.AddConstraint(
            model_name='taskeventwatermark',
            constraint=models.CheckConstraint(condition=models.Q(('kind__in', ['task.execution.failed', 'task.retry.scheduled', 'task.retry.succeeded', 'task.dead', 'task.cancelled', 'task.run_now'])), name='task_event_watermark_kind_valid'),
        ),
    ]
