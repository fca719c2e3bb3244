"""RunbookRun.requester_identity and approver_identity: the user behind who requested and who
approved a run (an API client's service user), which four eyes compares from now on.

A run waiting for approval gets its requester's identity as the service would have recorded it: an
"api:<name>" requester is the service user of the client of that name that existed when it asked.
A run approved already keeps the names it was judged by (the actors), so every row passes the new
check."""

from django.db import migrations, models

API_PREFIX = "api:"


def fill_identities(apps, schema_editor):
    RunbookRun = apps.get_model("compensation", "RunbookRun")
    ApiClient = apps.get_model("audit", "ApiClient")
    for run in RunbookRun.objects.filter(requester_identity="").iterator():
        run.requester_identity, run.approver_identity = run.requested_by, run.approved_by
        if not run.approved_by and run.requested_by.startswith(API_PREFIX):
            # A migration's models have no get_username(); the project's users are auth.User.
            username = (ApiClient.objects.filter(name=run.requested_by.removeprefix(API_PREFIX),
                                                 created_at__lte=run.requested_at, user__isnull=False)
                        .order_by("-created_at").values_list("user__username", flat=True).first())
            if username is not None:
                run.requester_identity = username
        run.save(update_fields=["requester_identity", "approver_identity"])


class Migration(migrations.Migration):

    dependencies = [
        ('audit', '0005_api_clients'),
        ('compensation', '0012_notification_subject_type'),
    ]

    operations = [
        migrations.AddField(
            model_name='runbookrun',
            name='requester_identity',
            field=models.CharField(default='', help_text="The user behind the request (an API client's service user).", max_length=200, verbose_name="requester's identity"),
            preserve_default=False,
        ),
        migrations.AddField(
            model_name='runbookrun',
            name='approver_identity',
            field=models.CharField(blank=True, help_text="The user behind the approval (an API client's service user).", max_length=200, verbose_name="approver's identity"),
        ),
        migrations.RunPython(fill_identities, migrations.RunPython.noop),
        migrations.RemoveConstraint(
            model_name='runbookrun',
            name='runbook_run_approver_not_requester',
        ),
        migrations.AddConstraint(
            model_name='runbookrun',
            constraint=models.CheckConstraint(condition=models.Q(('approver_identity', ''), models.Q(models.Q(('approver_identity__iexact', models.F('requester_identity')), _negated=True), models.Q(('approved_by__iexact', models.F('requested_by')), _negated=True)), _connector='OR'), name='runbook_run_approver_not_requester'),
        ),
        migrations.AddConstraint(
            model_name='runbookrun',
            constraint=models.CheckConstraint(condition=models.Q(models.Q(('requester_identity', ''), _negated=True), models.Q(('approved_by', ''), models.Q(('approver_identity', ''), _negated=True), _connector='OR')), name='runbook_run_identities_named'),
        ),
    ]
