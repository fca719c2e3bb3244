"""Every console group views the alerts and their history (telemetry.view_alert and
view_alertevent, in retryops.roles.VIEW), and, as every model of ours, the metrics' rollups and the
figures' snapshot: the groups again, from retryops.roles."""

from django.db import migrations

from retryops import roles


def sync_groups(apps, schema_editor):
    roles.sync_groups(apps, using=schema_editor.connection.alias)


class Migration(migrations.Migration):

    dependencies = [
        ("telemetry", "0004_alerts"),
        ("compensation", "0012_notification_subject_type"),
    ]

    operations = [
        migrations.RunPython(sync_groups, migrations.RunPython.noop),
    ]
