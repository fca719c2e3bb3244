"""The metrics rollup: counts per metric series below a transaction watermark (telemetry.metrics_rollup)."""

from django.db import migrations, models

import scheduling.models


class Migration(migrations.Migration):

    dependencies = [
        ('telemetry', '0001_initial'),
    ]

    operations = [
        migrations.CreateModel(
            name='MetricRollup',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('metric', models.CharField(max_length=60, verbose_name='metric')),
                ('flow', models.CharField(max_length=100, verbose_name='flow')),
                ('pool_id', models.BigIntegerField(verbose_name='pool id')),
                ('label', models.CharField(max_length=40, verbose_name='label')),
                ('le', models.FloatField(verbose_name='bucket upper bound')),
                ('count', models.BigIntegerField(default=0, verbose_name='count')),
                ('total', models.FloatField(default=0.0, verbose_name='sum of values')),
            ],
            options={
                'verbose_name': 'metric rollup',
                'verbose_name_plural': 'metric rollups',
                'constraints': [models.UniqueConstraint(fields=('metric', 'flow', 'pool_id', 'label', 'le'), name='metric_rollup_series_once'), models.CheckConstraint(condition=models.Q(('count__gte', 0)), name='metric_rollup_count_not_negative')],
            },
        ),
        migrations.CreateModel(
            name='MetricWatermark',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('below_xid', scheduling.models.TransactionIdField(verbose_name='below transaction')),
                ('advanced_at', models.DateTimeField(auto_now=True, verbose_name='advanced at')),
            ],
            options={
                'verbose_name': 'metric watermark',
                'verbose_name_plural': 'metric watermarks',
                'constraints': [models.CheckConstraint(condition=models.Q(('id', 1)), name='metric_watermark_single_row')],
            },
        ),
        migrations.CreateModel(
            name='MetricGauge',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('metric', models.CharField(max_length=60, verbose_name='metric')),
                ('labels', models.JSONField(default=dict, verbose_name='labels')),
                ('value', models.FloatField(verbose_name='value')),
            ],
            options={
                'verbose_name': 'metric gauge',
                'verbose_name_plural': 'metric gauges',
            },
        ),
    ]
