"""Migrations that only add an index to a table the hot path writes build it concurrently."""

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db.migrations.loader import MigrationLoader
from django.db.migrations.operations import AddIndex

# The tables every attempt writes, and the migrations before review found them building plain indexes.
HOT_MODELS = {"attempt", "taskevent"}
SINCE = ("scheduling", "0009_attempt_retry_due_index")


def test_an_index_only_migration_on_the_attempts_builds_it_without_blocking_writers():
    loader = MigrationLoader(None, ignore_no_migrations=True)
    blocking = [
        key for key, migration in loader.disk_migrations.items()
        if key[0] == "scheduling" and key[1] >= SINCE[1]
        and all(isinstance(op, AddIndex) for op in migration.operations)
        and any(op.model_name in HOT_MODELS and not isinstance(op, AddIndexConcurrently) for op in migration.operations)
    ]
    assert blocking == []
