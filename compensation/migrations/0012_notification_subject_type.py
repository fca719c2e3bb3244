"""A notification's subject may be an alert (telemetry) as well as a work order: subject_type, every
existing row a work order's; the subject index leads with it."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('compensation', '0011_dead_letter_xid'),
    ]

    operations = [
        migrations.RemoveIndex(
            model_name='notification',
            name='notification_subject_idx',
        ),
        migrations.AddField(
            model_name='notification',
            name='subject_type',
            field=models.CharField(choices=[('work_order', 'Work order'), ('alert', 'Alert')], db_default='work_order', default='work_order', max_length=20, verbose_name='subject type'),
        ),
        migrations.AlterField(
            model_name='notification',
            name='subject_id',
            field=models.BigIntegerField(help_text='The work order or the alert this notification is about.', verbose_name='subject id'),
        ),
        migrations.AddIndex(
            model_name='notification',
            index=models.Index(fields=['subject_type', 'subject_id', 'id'], name='notification_subject_idx'),
        ),
        migrations.AddConstraint(
            model_name='notification',
            constraint=models.CheckConstraint(condition=models.Q(('subject_type__in', ['work_order', 'alert'])), name='notification_subject_type_valid'),
        ),
    ]
