"""The base of management commands whose actions are audited."""

import argparse
import getpass
import os

from django.core.management.base import BaseCommand, CommandError
from django.utils.translation import gettext

from audit.choices import Channel
from audit.context import acting_as, clean_actor


def os_user() -> str:
    """Who runs the process; containers often have a uid without a passwd entry."""
    try:
        return getpass.getuser()
    except (OSError, KeyError):
        return f"uid {os.getuid()}"


class TranslatedHelpCommand(BaseCommand):
    """A command whose `help` may be translated (gettext_lazy)."""

    def create_parser(self, prog_name, subcommand, **kwargs):
        parser = super().create_parser(prog_name, subcommand, **kwargs)
        if parser.description:
            # A translated `help` in the language the command runs in: argparse formats it with
            # re, which takes only a real string.
            parser.description = str(parser.description)
        return parser


class AuditedCommand(TranslatedHelpCommand):
    """A command whose audit entries name the command channel and its actor: --actor if given
    (a command may declare its own --actor, e.g. a required one), else the OS user. Each run
    gets a request id of its own, shared by all the entries it writes."""

    def create_parser(self, prog_name, subcommand, **kwargs):
        parser = super().create_parser(prog_name, subcommand, **kwargs)
        try:
            parser.add_argument("--actor", help=gettext("Who runs this, for the audit log (default: the OS user)."))
        except argparse.ArgumentError:
            pass  # the command declares its own --actor (retry_resource's is required): that one is it
        return parser

    def execute(self, *args, **options):
        actor = options.get("actor")
        if actor is not None and not str(actor).strip():
            raise CommandError(gettext("--actor must name who runs this command"))
        with acting_as(actor=clean_actor(actor) if actor else os_user(), channel=Channel.COMMAND):
            return super().execute(*args, **options)
