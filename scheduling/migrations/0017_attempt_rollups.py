"""The rollups of attempts (FailureRollup, RetryRollup) and their mark: scheduling.services.rollups keeps them."""

import scheduling.models
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('scheduling', '0016_task_first_run'),
    ]

    operations = [
        migrations.CreateModel(
            name='RetryRollup',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('period_start', models.DateTimeField(unique=True, verbose_name='hour')),
                ('succeeded', models.PositiveIntegerField(default=0, verbose_name='retries succeeded')),
                ('failed', models.PositiveIntegerField(default=0, verbose_name='retries failed')),
                ('dead', models.PositiveIntegerField(default=0, verbose_name='retries dead')),
                ('started', models.PositiveIntegerField(default=0, verbose_name='retries started')),
                ('late', models.PositiveIntegerField(default=0, verbose_name='retries started late')),
            ],
            options={
                'verbose_name': 'retry rollup',
                'verbose_name_plural': 'retry rollups',
            },
        ),
        migrations.CreateModel(
            name='AttemptRollupMark',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('below_xid', scheduling.models.TransactionIdField(verbose_name='below transaction')),
                ('kept_from', models.DateTimeField(blank=True, null=True, verbose_name='kept from')),
                ('grace_seconds', models.FloatField(blank=True, null=True, verbose_name='grace (seconds)')),
                ('advanced_at', models.DateTimeField(auto_now=True, verbose_name='advanced at')),
            ],
            options={
                'verbose_name': 'attempt rollup mark',
                'verbose_name_plural': 'attempt rollup marks',
                'constraints': [models.CheckConstraint(condition=models.Q(('id', 1)), name='attempt_rollup_mark_single_row')],
            },
        ),
        migrations.CreateModel(
            name='FailureRollup',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('period_start', models.DateTimeField(verbose_name='period start')),
                ('period_hours', models.PositiveSmallIntegerField(verbose_name='period (hours)')),
                ('policy_id', models.BigIntegerField(verbose_name='policy id')),
                ('signature', models.CharField(max_length=500, verbose_name='error signature')),
                ('failures', models.PositiveIntegerField(verbose_name='failures')),
                ('retries', models.PositiveIntegerField(verbose_name='retries')),
                ('wasted', models.PositiveIntegerField(verbose_name='wasted retries')),
                ('dead', models.PositiveIntegerField(verbose_name='dead')),
                ('recovered_same', models.PositiveIntegerField(verbose_name='recovered on the same resource')),
                ('recovered_other', models.PositiveIntegerField(verbose_name='recovered on another resource')),
                ('latest_attempt_id', models.BigIntegerField(verbose_name='latest failure')),
            ],
            options={
                'verbose_name': 'failure rollup',
                'verbose_name_plural': 'failure rollups',
                'constraints': [models.UniqueConstraint(fields=('period_hours', 'period_start', 'policy_id', 'signature'), name='failure_rollup_once_per_period'), models.CheckConstraint(condition=models.Q(('period_hours__in', [1, 24])), name='failure_rollup_hour_or_day')],
            },
        ),
    ]
