from django.contrib.postgres.operations import TrigramExtension
from django.db import migrations, models

# The console's search (a resource's key or its last failure reason containing the words, case-
# insensitively: the admin's UPPER(column) LIKE UPPER('%words%')) reads trigram indexes instead of
# every row. Written in SQL: Django 5.2 renders an expression index with an operator class as
# ((UPPER("key") gin_trgm_ops)), which PostgreSQL refuses.
INDEXES = {
    "resource_key_trgm_idx": "key",
    "resource_reason_trgm_idx": "last_failure_reason",
}


class Migration(migrations.Migration):

    dependencies = [
        ("resources", "0003_console"),
    ]

    operations = [
        # A trusted extension since PostgreSQL 13: the database's owner may create it, no superuser needed.
        TrigramExtension(),
        *(
            migrations.RunSQL(
                f'CREATE INDEX {name} ON resources_resource USING gin ((UPPER({column}::text)) gin_trgm_ops)',
                f"DROP INDEX {name}",
            )
            for name, column in INDEXES.items()
        ),
        migrations.AddIndex(
            model_name="resource",
            index=models.Index(models.F("last_failure_at").desc(nulls_last=True),
                               condition=models.Q(consecutive_failures__gt=0), name="resource_failing_recent_idx"),
        ),
    ]
