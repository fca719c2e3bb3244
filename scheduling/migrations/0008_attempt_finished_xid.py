"""Attempt.finished_xid: the transaction that finished an attempt, written by the database.

A trigger rather than each service: an attempt ends on five paths (a success's one statement, a
failure's save, an attempt that never ran, a probe, an abandoned attempt), and one that forgot
the column would leave its attempt out of telemetry's histograms for good. The column is the
database's: set once, when the outcome leaves `running` (or a row is inserted finished), and
kept on every later write, so a whole-row save of a stale instance cannot clear or move it.

Attempts finished before this migration get 0, "before every watermark", as a constant default
that rewrites no row (as scheduling 0003 did for TaskEvent.xid); so do those running at this
moment, which the rollup skips while they run (it counts finished attempts only) and the trigger
gives their real transaction id when they finish.
"""

from django.db import migrations, models

import scheduling.models

FUNCTION = """
CREATE FUNCTION scheduling_attempt_finished_xid() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' OR OLD.outcome = 'running' THEN
        NEW.finished_xid := pg_current_xact_id();
    ELSE
        NEW.finished_xid := OLD.finished_xid;
    END IF;
    RETURN NEW;
END
$$;
"""

# The WHEN conditions keep the hot path's own writes (an attempt inserted running, the task's
# other columns) from calling the function at all.
TRIGGERS = """
CREATE TRIGGER attempt_finished_xid_on_insert BEFORE INSERT ON scheduling_attempt
    FOR EACH ROW WHEN (NEW.outcome <> 'running') EXECUTE FUNCTION scheduling_attempt_finished_xid();
CREATE TRIGGER attempt_finished_xid_on_update BEFORE UPDATE ON scheduling_attempt
    FOR EACH ROW WHEN ((OLD.outcome = 'running' AND NEW.outcome <> 'running')
                       OR OLD.finished_xid IS DISTINCT FROM NEW.finished_xid)
    EXECUTE FUNCTION scheduling_attempt_finished_xid();
"""

DROP = """
DROP TRIGGER IF EXISTS attempt_finished_xid_on_update ON scheduling_attempt;
DROP TRIGGER IF EXISTS attempt_finished_xid_on_insert ON scheduling_attempt;
DROP FUNCTION IF EXISTS scheduling_attempt_finished_xid();
"""


class Migration(migrations.Migration):

    dependencies = [
        ('resources', '0006_claim_permission'),
        ('scheduling', '0007_verbose_names'),
    ]

    operations = [
        migrations.AddField(
            model_name='attempt',
            name='finished_xid',
            field=scheduling.models.TransactionIdField(
                blank=True, editable=False, null=True, verbose_name='finishing transaction id',
                db_default=models.Value('0', output_field=scheduling.models.TransactionIdField())),
        ),
        migrations.AlterField(
            model_name='attempt',
            name='finished_xid',
            field=scheduling.models.TransactionIdField(blank=True, editable=False, null=True,
                                                       verbose_name='finishing transaction id'),
        ),
        migrations.RunSQL(sql=[FUNCTION, TRIGGERS], reverse_sql=DROP),
        migrations.AddIndex(
            model_name='attempt',
            index=models.Index(condition=models.Q(('finished_xid__isnull', False)), fields=['finished_xid'], name='attempt_finished_xid_idx'),
        ),
    ]
