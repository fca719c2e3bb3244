"""The dead-letter clean-up service: each batch one locked statement, its archive lines as the
Python encoder wrote them, rows that changed meanwhile left alone."""

import json
import threading
from datetime import UTC, datetime, timedelta
from io import StringIO

import pytest
from django.core.serializers.json import DjangoJSONEncoder
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from audit.models import AuditEntry
from compensation.choices import DeadLetterState
from compensation.models import DeadLetter
from compensation.services.cleanup import cleanup_dead_letters, parse_states
from compensation.services.dead_letters import collect_dead_letters, discard_dead_letter
from retryops.errors import BadInput
from tests.compensation.conftest import dead_tasks

pytestmark = pytest.mark.django_db


def discarded_letters(pool, policy, n: int) -> list[DeadLetter]:
    """`n` dead letters, discarded, that died 40 days ago."""
    dead_tasks(pool=pool, policy=policy, n=n)
    letters = collect_dead_letters()
    for letter in letters:
        discard_dead_letter(dead_letter=letter, actor="ops:carol")
    DeadLetter.objects.update(died_at=timezone.now() - timedelta(days=40))
    return sorted(letters, key=lambda letter: letter.pk)


def python_lines() -> str:
    """The archive as the clean-up wrote it before it ran in SQL: .values(), DjangoJSONEncoder."""
    rows = DeadLetter.objects.order_by("pk").values()
    return "".join(json.dumps(row, cls=DjangoJSONEncoder, ensure_ascii=False) + "\n" for row in rows)


@pytest.mark.parametrize("purge", [False, True], ids=["archive only", "archive and purge"])
def test_archive_lines_are_byte_for_byte_what_the_python_encoder_wrote(pool, alice, instant_policy, purge):
    first, second, third = discarded_letters(pool, instant_policy, 3)
    DeadLetter.objects.filter(pk=first.pk).update(
        last_error='say "hi"\\ \n\r\t\b\f \x01\x1f \x7f 超时 ☃ 🙂 \u2028', resource=alice,
        died_at=datetime(2020, 2, 29, 23, 59, 59, 123987, tzinfo=UTC))
    DeadLetter.objects.filter(pk=second.pk).update(died_at=datetime(2020, 1, 1, tzinfo=UTC), work_order=None)
    DeadLetter.objects.filter(pk=third.pk).update(died_at=datetime(2020, 1, 1, 0, 0, 0, 500, tzinfo=UTC))
    expected, archive = python_lines(), StringIO()
    cleanup_dead_letters(older_than_days=30, states="discarded", actor="ops:carol", archive=archive,
                         purge=purge)
    assert archive.getvalue() == expected


def test_a_batch_archives_and_purges_in_one_statement(pool, instant_policy, tmp_path):
    discarded_letters(pool, instant_policy, 5)
    with (tmp_path / "dlq.jsonl").open("a") as archive, CaptureQueriesContext(connection) as queries:
        cleanup_dead_letters(older_than_days=30, states="discarded", actor="ops:carol", archive=archive,
                             purge=True, batch_size=2)
    on_letters = [q["sql"] for q in queries if DeadLetter._meta.db_table in q["sql"]]
    # Three batches, and the statement that found nothing left.
    assert len(on_letters) == 4
    assert all("FOR UPDATE SKIP LOCKED" in sql and "DELETE" in sql for sql in on_letters)


def test_each_batch_takes_at_most_the_batch_size(pool, instant_policy):
    discarded_letters(pool, instant_policy, 5)
    cleanup_dead_letters(older_than_days=30, states="discarded", actor="ops:carol", purge=True,
                         batch_size=2)
    entries = AuditEntry.objects.filter(action="dead_letter.cleanup").order_by("id")
    assert [entry.before["count"] for entry in entries] == [2, 2, 1]


def test_archiving_alone_keeps_the_dead_letters(pool, instant_policy):
    letters = discarded_letters(pool, instant_policy, 3)
    archive = StringIO()
    result = cleanup_dead_letters(older_than_days=30, states="discarded", actor="ops:carol",
                                  archive=archive)
    assert (result.archived, result.purged, DeadLetter.objects.count()) == (3, 0, 3)
    assert [json.loads(line)["id"] for line in archive.getvalue().splitlines()] == [letter.pk for letter in letters]


def test_an_archive_that_cannot_be_written_purges_nothing(pool, instant_policy, tmp_path):
    discarded_letters(pool, instant_policy, 3)
    (tmp_path / "dlq.jsonl").write_text("")
    with (tmp_path / "dlq.jsonl").open("r") as read_only, pytest.raises(OSError):
        cleanup_dead_letters(older_than_days=30, states="discarded", actor="ops:carol", archive=read_only,
                             purge=True)
    assert DeadLetter.objects.count() == 3
    assert not AuditEntry.objects.filter(action="dead_letter.cleanup").exists()


@pytest.mark.django_db(transaction=True)
def test_a_dead_letter_being_replayed_while_the_clean_up_runs_is_not_purged(pool, instant_policy):
    kept, *others = discarded_letters(pool, instant_policy, 3)
    locked, cleaned = threading.Event(), threading.Event()

    def replay_under_way():
        # What a replay does: lock the row, move it on, commit; the clean-up runs before the commit.
        try:
            with transaction.atomic():
                letter = DeadLetter.objects.select_for_update().get(pk=kept.pk)
                DeadLetter.objects.filter(pk=letter.pk).update(state=DeadLetterState.REPLAYING,
                                                               replay_task=letter.task_id)
                locked.set()
                cleaned.wait(timeout=30)
        finally:
            connection.close()

    replayer = threading.Thread(target=replay_under_way)
    replayer.start()
    assert locked.wait(timeout=30)
    try:
        result = cleanup_dead_letters(older_than_days=30, states="discarded", actor="ops:carol",
                                      purge=True)
    finally:
        cleaned.set()
        replayer.join()
    assert result.purged == 2
    assert list(DeadLetter.objects.values_list("pk", "state")) == [(kept.pk, DeadLetterState.REPLAYING)]


def test_no_table_points_at_dead_letters_so_a_bare_delete_leaves_nothing_dangling():
    # The purge deletes in SQL, without Django's collector: a model pointing here would need its rows handled.
    assert DeadLetter._meta.related_objects == ()




def test_a_state_that_is_not_text_is_refused_naming_the_field():
    with pytest.raises(BadInput, match="state must name dead-letter states"):
        parse_states([["open"]])
