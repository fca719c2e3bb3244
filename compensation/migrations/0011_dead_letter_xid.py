"""DeadLetter.xid: the transaction that collected a dead letter, for telemetry's metrics rollup.

Dead letters collected before this migration get 0, "before every watermark", as a constant
default that rewrites no row (as scheduling 0003 did for TaskEvent.xid); new ones get their
collector's transaction id."""

from django.db import migrations, models

import scheduling.models


class Migration(migrations.Migration):

    dependencies = [
        ('compensation', '0010_operators_claim'),
        ('scheduling', '0008_attempt_finished_xid'),
    ]

    operations = [
        migrations.AddField(
            model_name='deadletter',
            name='xid',
            field=scheduling.models.TransactionIdField(
                db_default=models.Value('0', output_field=scheduling.models.TransactionIdField()), editable=False,
                verbose_name='transaction id'),
        ),
        migrations.AlterField(
            model_name='deadletter',
            name='xid',
            field=scheduling.models.TransactionIdField(db_default=models.Func(function='pg_current_xact_id', output_field=scheduling.models.TransactionIdField()), editable=False, verbose_name='transaction id'),
        ),
        migrations.AddIndex(
            model_name='deadletter',
            index=models.Index(fields=['xid'], name='dead_letter_xid_idx'),
        ),
    ]
