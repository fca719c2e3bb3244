"""The audit table is append-only in the database: UPDATE, DELETE and TRUNCATE fail, whoever asks."""

import pytest
from django.db import IntegrityError, connection, transaction
from django.db.migrations.executor import MigrationExecutor

from audit.models import AuditEntry
from audit.services import record_audit

REFUSED = "audit entries are append-only"


@pytest.fixture
def entry(alice):
    return record_audit(action="resource.quarantine", target=alice, reason="leaked key")


def test_an_update_of_the_audit_table_fails_in_the_database(entry):
    with pytest.raises(IntegrityError, match=f"{REFUSED}: UPDATE on audit_auditentry refused"), transaction.atomic():
        AuditEntry.objects.filter(pk=entry.pk).update(reason="nothing happened")
    assert AuditEntry.objects.get(pk=entry.pk).reason == "leaked key"


def test_saving_a_changed_entry_fails_in_the_database(entry):
    entry.actor = "someone else"
    with pytest.raises(IntegrityError, match=REFUSED), transaction.atomic():
        entry.save()
    assert AuditEntry.objects.get(pk=entry.pk).actor == "system"


def test_a_raw_sql_update_fails_too(entry):
    with pytest.raises(IntegrityError, match=REFUSED), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("UPDATE audit_auditentry SET actor = 'someone else'")


def test_a_delete_from_the_audit_table_fails_in_the_database(entry):
    with pytest.raises(IntegrityError, match=f"{REFUSED}: DELETE on audit_auditentry refused"), transaction.atomic():
        AuditEntry.objects.filter(pk=entry.pk).delete()
    assert AuditEntry.objects.filter(pk=entry.pk).exists()


def test_a_truncate_of_the_audit_table_fails_where_the_database_does_not_allow_it(entry):
    # The test database allows TRUNCATE (tests/conftest.py) so Django can empty it between tests;
    # a production database has no such setting, which is what SET LOCAL recreates here.
    with pytest.raises(IntegrityError, match=f"{REFUSED}: TRUNCATE on audit_auditentry refused"), \
            transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL retryops.audit_truncate_allowed = ''")
        cursor.execute("TRUNCATE audit_auditentry")
    assert AuditEntry.objects.filter(pk=entry.pk).exists()


def test_the_refusal_hints_at_recording_a_new_entry(entry):
    with pytest.raises(IntegrityError) as error, transaction.atomic():
        AuditEntry.objects.update(reason="")
    assert "Record a new audit entry" in error.value.__cause__.diag.message_hint


def test_unwinding_the_append_only_migration_allows_updates_again(entry):
    # Migrations run in this test's transaction, which the test's end rolls back.
    executor = MigrationExecutor(connection)
    executor.migrate([("audit", "0001_initial")])
    AuditEntry.objects.filter(pk=entry.pk).update(reason="rewritten")
    assert AuditEntry.objects.get(pk=entry.pk).reason == "rewritten"

    executor.loader.build_graph()
    executor.migrate([("audit", "0002_append_only")])
    with pytest.raises(IntegrityError, match=REFUSED), transaction.atomic():
        AuditEntry.objects.filter(pk=entry.pk).update(reason="again")


def test_the_database_refuses_an_entry_without_an_actor(alice):
    with pytest.raises(IntegrityError, match="audit_actor_and_target_named"), transaction.atomic():
        AuditEntry.objects.create(actor="", channel="system", action="resource.reset", target_type="resources.resource",
                                  target_id=str(alice.pk))


def test_the_database_refuses_an_unknown_channel(alice):
    with pytest.raises(IntegrityError, match="audit_channel_valid"), transaction.atomic():
        AuditEntry.objects.create(actor="carol", channel="web", action="resource.reset",
                                  target_type="resources.resource", target_id=str(alice.pk))


def test_the_database_refuses_an_action_that_is_not_noun_dot_verb(alice):
    with pytest.raises(IntegrityError, match="audit_action_noun_verb"), transaction.atomic():
        AuditEntry.objects.create(actor="carol", channel="admin", action="Reset resource",
                                  target_type="resources.resource", target_id=str(alice.pk))
