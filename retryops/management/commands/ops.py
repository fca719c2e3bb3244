"""`manage.py ops`: the ops process (retryops.ops), which runs every app's periodic steps."""

import signal

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from retryops import ops
from retryops.migrated import refuse_unmigrated


def cadence(text: str) -> tuple[str, float]:
    name, _, seconds = text.partition("=")
    try:
        return name, float(seconds)
    except ValueError:
        raise CommandError(f"--every {text!r}: write STEP=SECONDS, e.g. dispatch=1") from None


class Command(BaseCommand):
    help = ("Run every periodic step of every app (dispatch, batch ticks, dead letters, notifications, escalation, "
            "the event stream, the metrics rollup, alerts, clean-ups). Run two on two hosts: one runs the steps, "
            "the other takes over within seconds when it dies.")

    def add_arguments(self, parser):
        parser.add_argument("--every", type=cadence, action="append", default=[], metavar="STEP=SECONDS",
                            help="Run a step at another cadence (tests and benchmarks), e.g. --every dispatch=1.")

    def handle(self, *args, every, **options):
        if settings.DB_TRANSACTION_POOLER:
            # The lock lives as long as its session, which a transaction pooler hands to others.
            raise CommandError("the ops process holds a session-level lock: point its DATABASE_URL at PostgreSQL "
                               "itself, not at the transaction pooler, and leave DB_TRANSACTION_POOLER unset")
        refuse_unmigrated()
        try:
            steps = ops.with_cadences(dict(every))
        except ValueError as error:
            raise CommandError(str(error)) from None
        process = ops.Ops(steps)
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: process.stopping.set())
        process.run()
        if process.overran:  # a hung step: exit non-zero, for the supervisor to restart this process
            raise CommandError(f"ops step {process.overran.name} ran past its budget of {process.overran.budget} s")
