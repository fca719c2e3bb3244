"""Operators claim, release and heartbeat resources over the API (resources.claim_resource, in
retryops.roles.OPERATE): the groups again, from retryops.roles."""

from django.db import migrations

from retryops import roles


def sync_groups(apps, schema_editor):
    roles.sync_groups(apps, using=schema_editor.connection.alias)


class Migration(migrations.Migration):

    dependencies = [
        ("resources", "0006_claim_permission"),
        ("compensation", "0009_api_client_view_permissions"),
    ]

    operations = [
        migrations.RunPython(sync_groups, migrations.RunPython.noop),
    ]
