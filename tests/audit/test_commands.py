"""AuditedCommand: a command's entries name the command channel, its actor and one id per run."""

from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import transaction

from audit.management.base import AuditedCommand, os_user
from audit.models import AuditEntry
from audit.services import record_audit
from resources.models import Resource


class ResetCommand(AuditedCommand):
    """Records one reset of each resource named, as a real command's service would."""

    def add_arguments(self, parser):
        parser.add_argument("ids", nargs="+", type=int)

    def handle(self, *args, ids, **options):
        with transaction.atomic():
            for pk in ids:
                record_audit(action="resource.reset", target=Resource.objects.get(pk=pk))


class RetryCommand(ResetCommand):
    """Declares its own required --actor, like scheduling's retry_resource."""

    def add_arguments(self, parser):
        super().add_arguments(parser)
        parser.add_argument("--actor", required=True, help="Who asks for the retry.")


def test_a_command_records_its_actor_option_on_the_command_channel(alice):
    call_command(ResetCommand(), alice.pk, actor="carol")
    entry = AuditEntry.objects.get()
    assert (entry.actor, entry.channel) == ("carol", "command")


def test_without_an_actor_option_the_os_user_is_the_actor(alice):
    call_command(ResetCommand(), alice.pk)
    assert AuditEntry.objects.get().actor == os_user()


def test_the_entries_of_one_run_share_a_request_id_and_the_next_run_gets_another(alice, bob):
    call_command(ResetCommand(), alice.pk, bob.pk, actor="carol")
    call_command(ResetCommand(), alice.pk, actor="carol")
    first, second, third = AuditEntry.objects.order_by("id")
    assert first.request_id and first.request_id == second.request_id != third.request_id


def test_a_command_with_its_own_actor_option_uses_it_for_the_audit(alice):
    call_command(RetryCommand(), alice.pk, actor="dave")
    assert AuditEntry.objects.get().actor == "dave"


def test_a_command_with_its_own_required_actor_still_requires_it(alice):
    with pytest.raises(CommandError, match="--actor"):
        call_command(RetryCommand(), alice.pk)


def test_an_empty_actor_option_is_refused(alice):
    with pytest.raises(CommandError, match="--actor must name"):
        call_command(ResetCommand(), alice.pk, actor=" ")
    assert not AuditEntry.objects.exists()


@pytest.mark.django_db(transaction=True)  # run_from_argv closes the connection when it is done
def test_the_actor_option_from_the_command_line_is_parsed(alice):
    ResetCommand().run_from_argv(["manage.py", "reset_for_test", str(alice.pk), "--actor", "erin"])
    assert AuditEntry.objects.get().actor == "erin"


def test_the_command_context_ends_with_the_command(alice):
    call_command(ResetCommand(), alice.pk, actor="carol", stdout=StringIO())
    assert record_audit(action="resource.reset", target=alice).channel == "system"
