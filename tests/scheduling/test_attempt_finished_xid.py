"""Attempt.finished_xid, which the database writes (scheduling migration 0008): the transaction
that finished an attempt, whichever path finished it, never moved or cleared afterwards."""

import pytest
from django.db import connection, transaction
from django.utils import timezone

from scheduling.models import Attempt
from tests.factories import AttemptFactory

pytestmark = pytest.mark.django_db


def current_xid() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_current_xact_id()::text")
        return int(cursor.fetchone()[0])


def finished_xid(attempt) -> int | None:
    return Attempt.objects.values_list("finished_xid", flat=True).get(pk=attempt.pk)


def test_a_running_attempt_has_no_finishing_transaction():
    assert finished_xid(AttemptFactory()) is None


def test_finishing_an_attempt_records_the_transaction_that_finished_it():
    attempt = AttemptFactory()
    with transaction.atomic():
        Attempt.objects.filter(pk=attempt.pk).update(outcome="succeeded", finished_at=timezone.now())
        assert finished_xid(attempt) == current_xid()


def test_an_attempt_written_finished_records_its_transaction():
    with transaction.atomic():
        attempt = AttemptFactory(outcome="failed", finished_at=timezone.now())
        assert finished_xid(attempt) == current_xid()


def test_a_whole_row_save_of_a_finished_attempt_keeps_its_finishing_transaction():
    attempt = AttemptFactory()
    Attempt.objects.filter(pk=attempt.pk).update(outcome="failed", finished_at=timezone.now())
    recorded = finished_xid(attempt)
    stale = Attempt.objects.get(pk=attempt.pk)
    stale.finished_xid = None
    stale.error_message = "noted later"
    stale.save()
    assert finished_xid(attempt) == recorded
