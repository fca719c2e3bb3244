"""Viewers view the REST API's clients too (retryops.roles.VIEW gained audit.view_apiclient and
audit.view_idempotencykey): the groups again, from retryops.roles."""

from django.db import migrations

from retryops import roles


def sync_groups(apps, schema_editor):
    roles.sync_groups(apps, using=schema_editor.connection.alias)


class Migration(migrations.Migration):

    dependencies = [
        ("audit", "0005_api_clients"),
        ("compensation", "0008_translated_labels"),
    ]

    operations = [
        migrations.RunPython(sync_groups, migrations.RunPython.noop),
    ]
