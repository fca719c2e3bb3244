"""compensation 0013: runs recorded before four eyes compared identities get them. A run still
waiting for approval, requested by an API client, is its service user's; an approved run keeps the
names it was judged by, so every row passes the new check."""

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

pytestmark = pytest.mark.django_db

BEFORE, AFTER = ("compensation", "0012_notification_subject_type"), ("compensation", "0013_runbook_run_identities")


def migrate(target):
    # The rows below were written in this test's transaction: their deferred foreign-key checks
    # would keep ALTER TABLE from running ("pending trigger events").
    with connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
    executor = MigrationExecutor(connection)
    executor.migrate([target])
    return executor.loader.project_state([target]).apps


@pytest.fixture
def old_runs(django_user_model):
    erin = django_user_model.objects.create_user(username="erin")
    old = migrate(BEFORE)
    client = old.get_model("audit", "ApiClient").objects.create(
        name="billing", key_prefix="rok_00000000", key_hash="0" * 64, user_id=erin.pk, created_by="test")
    order = old.get_model("compensation", "WorkOrder").objects.create(
        title="refunds", flow="demo", opened_by="test")
    runs = old.get_model("compensation", "RunbookRun").objects
    fields = {"work_order": order, "runbook": "refund-failed-charges", "action": "request_refund", "external": True}
    waiting = runs.create(**fields, token="t-1", requested_by="api:billing", state="requested")
    approved = runs.create(**fields, token="t-2", requested_by="api:billing", state="approved", approved_by="erin",
                           approved_at=timezone.now())
    by_hand = runs.create(**fields, token="t-3", requested_by="carol", state="requested")
    return waiting.pk, approved.pk, by_hand.pk


def test_runs_get_the_identities_four_eyes_compares(old_runs):
    waiting, approved, by_hand = old_runs
    runs = migrate(AFTER).get_model("compensation", "RunbookRun").objects
    identities = {run.pk: (run.requester_identity, run.approver_identity) for run in runs.all()}
    assert identities == {waiting: ("erin", ""), approved: ("api:billing", "erin"), by_hand: ("carol", "")}
