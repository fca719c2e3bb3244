"""The console's groups (retryops.roles.ROLES) with their permissions: viewers, operators,
approvers and policy editors. Reversed, the groups are deleted (their users stay)."""

from django.db import migrations

from retryops import roles


def create_groups(apps, schema_editor):
    # A permission not found belongs to a model created after this migration: the migration
    # that creates it grants it (roles.sync_groups again).
    roles.sync_groups(apps, using=schema_editor.connection.alias)


def delete_groups(apps, schema_editor):
    roles.remove_groups(apps, using=schema_editor.connection.alias)


class Migration(migrations.Migration):

    dependencies = [
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
        ("audit", "0004_verbose_names"),
        ("resources", "0005_verbose_names"),
        ("scheduling", "0006_task_repeats"),
        ("compensation", "0006_console_permissions"),
    ]

    operations = [
        migrations.RunPython(create_groups, delete_groups),
    ]
