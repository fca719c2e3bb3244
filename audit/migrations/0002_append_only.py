"""The audit table is append-only in the database itself: UPDATE, DELETE and TRUNCATE raise, so
neither a bug nor a whole-row save nor a cascade can rewrite history.

TRUNCATE is allowed only where the setting retryops.audit_truncate_allowed is 'on': the test
database sets it (tests/conftest.py), because Django's transactional tests empty every table
with one TRUNCATE. Production never sets it; pruning old entries is a deliberate
`ALTER TABLE ... DISABLE TRIGGER` by a database owner.
"""

from django.db import migrations

FUNCTION = """
CREATE FUNCTION audit_entry_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'TRUNCATE' AND current_setting('retryops.audit_truncate_allowed', true) = 'on' THEN
        RETURN NULL;
    END IF;
    RAISE EXCEPTION 'audit entries are append-only: % on % refused', TG_OP, TG_TABLE_NAME
        USING ERRCODE = 'restrict_violation',
              HINT = 'Record a new audit entry (audit.services.record_audit) instead of changing an old one.';
END
$$;
"""

# Statement triggers: even an UPDATE or DELETE that matches no row is a bug worth failing on.
TRIGGERS = """
CREATE TRIGGER audit_entry_no_update_delete BEFORE UPDATE OR DELETE ON audit_auditentry
    FOR EACH STATEMENT EXECUTE FUNCTION audit_entry_append_only();
CREATE TRIGGER audit_entry_no_truncate BEFORE TRUNCATE ON audit_auditentry
    FOR EACH STATEMENT EXECUTE FUNCTION audit_entry_append_only();
"""

DROP = """
DROP TRIGGER IF EXISTS audit_entry_no_truncate ON audit_auditentry;
DROP TRIGGER IF EXISTS audit_entry_no_update_delete ON audit_auditentry;
DROP FUNCTION IF EXISTS audit_entry_append_only();
"""


class Migration(migrations.Migration):

    dependencies = [
        ("audit", "0001_initial"),
    ]

    operations = [
        migrations.RunSQL(sql=[FUNCTION, TRIGGERS], reverse_sql=DROP),
    ]
