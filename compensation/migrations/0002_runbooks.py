# Runbook runs (compensation.runbook_models).

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('compensation', '0001_dead_letters'),
    ]

    operations = [
        migrations.CreateModel(
            name='RunbookRun',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('runbook', models.CharField(max_length=100)),
                ('action', models.CharField(max_length=100)),
                ('external', models.BooleanField(default=False)),
                ('input', models.JSONField(blank=True, default=dict)),
                ('token', models.CharField(help_text='Idempotency key: the same token is the same run.', max_length=100)),
                ('state', models.CharField(choices=[('requested', 'Waiting for approval'), ('approved', 'Ready to run'), ('running', 'Running'), ('succeeded', 'Succeeded'), ('failed', 'Failed'), ('rejected', 'Rejected')], default='requested', max_length=20)),
                ('requested_by', models.CharField(max_length=200)),
                ('requested_at', models.DateTimeField(auto_now_add=True)),
                ('approved_by', models.CharField(blank=True, max_length=200)),
                ('approved_at', models.DateTimeField(blank=True, null=True)),
                ('rejected_by', models.CharField(blank=True, max_length=200)),
                ('rejected_at', models.DateTimeField(blank=True, null=True)),
                ('reject_reason', models.TextField(blank=True)),
                ('run_by', models.CharField(blank=True, max_length=200)),
                ('started_at', models.DateTimeField(blank=True, null=True)),
                ('finished_at', models.DateTimeField(blank=True, null=True)),
                ('result', models.JSONField(blank=True, null=True)),
                ('error', models.TextField(blank=True)),
                ('repairs', models.JSONField(blank=True, default=list)),
                ('updated_at', models.DateTimeField(auto_now=True)),
                ('work_order', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='runbook_runs', to='compensation.workorder')),
            ],
            options={
                'ordering': ['-id'],
                'constraints': [models.CheckConstraint(condition=models.Q(('state__in', ['requested', 'approved', 'running', 'succeeded', 'failed', 'rejected'])), name='runbook_run_state_valid'), models.UniqueConstraint(fields=('token',), name='runbook_run_token_unique'), models.CheckConstraint(condition=models.Q(('approved_by', ''), models.Q(('approved_by__iexact', models.F('requested_by')), _negated=True), _connector='OR'), name='runbook_run_approver_not_requester'), models.CheckConstraint(condition=models.Q(('external', False), ('state__in', ['requested', 'rejected']), models.Q(('approved_by', ''), _negated=True), _connector='OR'), name='runbook_run_external_approved'), models.CheckConstraint(condition=models.Q(('approved_by', ''), ('approved_at__isnull', False), _connector='OR'), name='runbook_run_approved_has_time'), models.CheckConstraint(condition=models.Q(models.Q(('state__in', ('running', 'succeeded', 'failed')), _negated=True), models.Q(('started_at__isnull', False), models.Q(('run_by', ''), _negated=True)), _connector='OR'), name='runbook_run_started_has_runner'), models.CheckConstraint(condition=models.Q(models.Q(('state__in', ('succeeded', 'failed')), _negated=True), ('finished_at__isnull', False), _connector='OR'), name='runbook_run_finished_has_time'), models.CheckConstraint(condition=models.Q(models.Q(('state', 'rejected'), _negated=True), models.Q(models.Q(('rejected_by', ''), _negated=True), ('rejected_at__isnull', False)), _connector='OR'), name='runbook_run_rejected_has_who')],
            },
        ),
    ]
