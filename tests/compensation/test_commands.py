"""dlq_cleanup and retry_inspect: thin commands over the clean-up service and the overview selector."""

import json
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from audit.models import AuditEntry
from compensation.choices import DeadLetterState
from compensation.models import DeadLetter
from compensation.services.dead_letters import collect_dead_letters, discard_dead_letter
from tests.compensation.conftest import dead_tasks

pytestmark = pytest.mark.django_db


@pytest.fixture
def old_letters(pool, instant_policy):
    """Five discarded dead letters that died 40 days ago, and one open one."""
    dead_tasks(pool=pool, policy=instant_policy, n=6)
    letters = collect_dead_letters()
    for letter in letters[:5]:
        discard_dead_letter(dead_letter=letter, actor="ops:carol")
    DeadLetter.objects.update(died_at=timezone.now() - timedelta(days=40))
    return letters


def cleanup(*args, **kwargs) -> str:
    out = StringIO()
    call_command("dlq_cleanup", *args, stdout=out, stderr=StringIO(), **kwargs)
    return out.getvalue()


def test_cleanup_archives_then_purges_in_batches(old_letters, tmp_path):
    archive = tmp_path / "dlq.jsonl"
    said = cleanup("--older-than-days", "30", "--state", "discarded", "--archive", str(archive), "--purge",
                   "--batch-size", "2", "--actor", "ops:carol")
    assert "5 dead letters selected" in said and "archive 5" in said and "purge 5" in said
    lines = [json.loads(line) for line in archive.read_text().splitlines()]
    assert sorted(row["id"] for row in lines) == sorted(letter.pk for letter in old_letters[:5])
    assert list(DeadLetter.objects.values_list("state", flat=True)) == [DeadLetterState.OPEN]
    assert AuditEntry.objects.filter(action="dead_letter.cleanup", actor="ops:carol", channel="command").count() == 3


def test_cleanup_dry_run_counts_and_changes_nothing(old_letters):
    said = cleanup("--older-than-days", "30", "--state", "discarded", "--purge", "--dry-run")
    assert "5 dead letters selected" in said and "would purge 5" in said
    assert DeadLetter.objects.count() == 6


def test_cleanup_keeps_what_is_younger_than_the_age(old_letters):
    cleanup("--older-than-days", "60", "--state", "discarded", "--purge")
    assert DeadLetter.objects.count() == 6


def test_cleanup_with_a_negative_age_names_the_option(old_letters):
    with pytest.raises(CommandError, match="--older-than-days: older_than_days must be a whole number from 0"):
        cleanup("--older-than-days", "-1", "--purge")
    assert DeadLetter.objects.count() == 6


def test_cleanup_with_an_unknown_state_names_it(old_letters):
    with pytest.raises(CommandError, match="--state: unknown dead-letter state bogus"):
        cleanup("--older-than-days", "1", "--state", "discarded,bogus", "--purge")
    assert DeadLetter.objects.count() == 6


@pytest.mark.parametrize("where", ["missing-folder/dlq.jsonl", "."])
def test_cleanup_with_an_archive_it_cannot_write_names_the_option_and_purges_nothing(old_letters, tmp_path, where):
    with pytest.raises(CommandError, match="--archive: cannot write to"):
        cleanup("--older-than-days", "30", "--state", "discarded", "--archive", str(tmp_path / where), "--purge")
    assert DeadLetter.objects.count() == 6


@pytest.mark.django_db(transaction=True)
def test_cleanup_replays_the_open_retryable_ones_instead_of_purging_them(redis_conn, old_letters, alice):
    DeadLetter.objects.filter(state=DeadLetterState.OPEN).update(resource=alice)
    said = cleanup("--older-than-days", "30", "--state", "open,discarded", "--replay-retryable", "--purge")
    assert "replay 1" in said and "purge 5" in said
    assert list(DeadLetter.objects.values_list("state", flat=True)) == [DeadLetterState.REPLAYING]


def test_retry_inspect_shows_the_dlq_and_the_work_orders(redis_conn, old_letters):
    out = StringIO()
    call_command("retry_inspect", stdout=out)
    text = out.getvalue()
    assert "Dead letters" in text and "TimeoutError: upstream timed out" in text
    assert "Live work orders" in text and " ok " in text


def test_retry_inspect_json_is_one_object_for_scripts(redis_conn, old_letters):
    out = StringIO()
    call_command("retry_inspect", "--json", stdout=out)
    overview = json.loads(out.getvalue())
    assert set(overview) >= {"queues", "scheduled_retries", "running_attempts", "dead_letters", "work_orders"}
    assert overview["dead_letters"][0]["count"] == 1
    assert overview["queues"]["retries"]["waiting"] == 0


@pytest.mark.parametrize(("command", "args"), [("dlq_cleanup", ["--older-than-days", "30", "--purge"]),
                                               ("retry_inspect", [])])
def test_with_the_dlq_inspector_off_its_commands_refuse_naming_the_flag(old_letters, settings, command, args):
    settings.RETRYOPS_FLAGS_OFF = frozenset({"dlq-inspector"})
    with pytest.raises(CommandError, match="feature flag 'dlq-inspector' is listed in RETRYOPS_FLAGS_OFF"):
        call_command(command, *args, stdout=StringIO(), stderr=StringIO())
    assert DeadLetter.objects.count() == 6
