from django.db import migrations


class Migration(migrations.Migration):
    """The telemetry app's first migration: nothing yet; its tables come in the next ones."""

    initial = True
    dependencies = [("compensation", "0010_operators_claim")]
    operations = []
