from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    # Built without locking out the writers: every claim and release writes the table.
    atomic = False

    dependencies = [
        ('resources', '0006_claim_permission'),
    ]

    operations = [
        AddIndexConcurrently(
            model_name='resource',
            index=models.Index(condition=models.Q(('state', 'in_use')), fields=['id'], name='resource_in_use_idx'),
        ),
    ]
