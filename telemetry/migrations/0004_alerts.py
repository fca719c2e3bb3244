"""Alerts: one row per rule with its state and last reading, and their history (telemetry.alerts)."""

import django.db.models.deletion
import django.db.models.functions.datetime
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('telemetry', '0003_acceptance_snapshot'),
    ]

    operations = [
        migrations.CreateModel(
            name='Alert',
            fields=[
                ('id', models.BigAutoField(primary_key=True, serialize=False, verbose_name='ID')),
                ('rule', models.CharField(max_length=50, unique=True, verbose_name='rule')),
                ('state', models.CharField(choices=[('ok', 'OK'), ('firing', 'Firing')], default='ok', max_length=20, verbose_name='state')),
                ('since', models.DateTimeField(db_default=django.db.models.functions.datetime.Now(), help_text='When it entered its state.', verbose_name='since')),
                ('value', models.FloatField(blank=True, help_text='What the last evaluation read; empty when it could not judge.', null=True, verbose_name='value')),
                ('threshold', models.FloatField(help_text='It fires above this value.', verbose_name='threshold')),
                ('clear_level', models.FloatField(help_text='A firing alert resolves once its value has stayed at or below this.', verbose_name='clear level')),
                ('clear_since', models.DateTimeField(blank=True, help_text='Firing, and at or below its clear level since then.', null=True, verbose_name='clear since')),
                ('detail', models.CharField(blank=True, help_text='What the last evaluation saw, as the notification says it.', max_length=2000, verbose_name='detail')),
                ('facts', models.JSONField(blank=True, default=dict, verbose_name='facts')),
                ('evaluated_at', models.DateTimeField(blank=True, null=True, verbose_name='evaluated at')),
            ],
            options={
                'verbose_name': 'alert',
                'verbose_name_plural': 'alerts',
                'ordering': ['id'],
                'constraints': [models.CheckConstraint(condition=models.Q(('state__in', ['ok', 'firing'])), name='alert_state_valid'), models.CheckConstraint(condition=models.Q(('rule', ''), _negated=True), name='alert_rule_named'), models.CheckConstraint(condition=models.Q(('state', 'firing'), ('clear_since__isnull', True), _connector='OR'), name='alert_clearing_only_when_firing'), models.CheckConstraint(condition=models.Q(('value__isnull', True), models.Q(('value__gte', 0), ('value__lte', 1000000000000000.0)), _connector='OR'), name='alert_value_in_range'), models.CheckConstraint(condition=models.Q(('clear_level__gte', 0), ('clear_level__lte', models.F('threshold')), ('threshold__gte', 0), ('threshold__lte', 1000000000000000.0)), name='alert_levels_in_range')],
            },
        ),
        migrations.CreateModel(
            name='AlertEvent',
            fields=[
                ('id', models.BigAutoField(primary_key=True, serialize=False, verbose_name='ID')),
                ('kind', models.CharField(choices=[('fired', 'Fired'), ('resolved', 'Resolved')], max_length=20, verbose_name='kind')),
                ('at', models.DateTimeField(db_default=django.db.models.functions.datetime.Now(), verbose_name='at')),
                ('value', models.FloatField(blank=True, null=True, verbose_name='value')),
                ('level', models.FloatField(help_text='The threshold it went above, or the clear level it stayed at or below.', verbose_name='level crossed')),
                ('detail', models.CharField(blank=True, max_length=2000, verbose_name='detail')),
                ('facts', models.JSONField(blank=True, default=dict, verbose_name='facts')),
                ('alert', models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='events', to='telemetry.alert', verbose_name='alert')),
            ],
            options={
                'verbose_name': 'alert event',
                'verbose_name_plural': 'alert events',
                'ordering': ['-id'],
                'indexes': [models.Index(fields=['alert', '-id'], name='alert_event_history_idx')],
                'constraints': [models.CheckConstraint(condition=models.Q(('kind__in', ['fired', 'resolved'])), name='alert_event_kind_valid'), models.CheckConstraint(condition=models.Q(('value__isnull', True), models.Q(('value__gte', 0), ('value__lte', 1000000000000000.0)), _connector='OR'), name='alert_event_value_in_range'), models.CheckConstraint(condition=models.Q(('level__gte', 0), ('level__lte', 1000000000000000.0)), name='alert_event_level_in_range')],
            },
        ),
    ]
