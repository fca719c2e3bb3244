"""Archive and/or purge old dead letters; see compensation.services.cleanup."""

import signal
import sys

from django.core.management.base import CommandError
from django.utils.translation import gettext_lazy as _
from tqdm import tqdm

from audit.context import current
from audit.management.base import AuditedCommand
from compensation.flags import command_requires_dlq_inspector
from compensation.services.cleanup import DEFAULT_BATCH
from compensation.services.cleanup import cleanup_dead_letters, cleanup_queryset, parse_states
from retryops.errors import DomainError


class Command(AuditedCommand):
    help = _("Archive (to a JSON Lines file) and/or purge dead letters that died more than N days ago in "
             "the given states, in batches of ids with constant memory; optionally replay the open, "
             "retryable ones first. Prints what it did; --dry-run only counts.")

    def add_arguments(self, parser):
        parser.add_argument("--older-than-days", type=int, required=True,
                            help=_("Only dead letters older than this."))
        parser.add_argument("--state", default="resolved,discarded",
                            help=_("Comma-separated states (open, replayed, resolved, discarded); default "
                                   "resolved,discarded."))
        parser.add_argument("--archive", metavar="FILE.jsonl", help=_("Append each dead letter as a JSON line here."))
        parser.add_argument("--purge", action="store_true", help=_("Delete them (after archiving, with --archive)."))
        parser.add_argument("--replay-retryable", action="store_true",
                            help=_("First replay the open ones whose error is retryable; those are kept."))
        parser.add_argument("--batch-size", type=int, default=DEFAULT_BATCH)
        parser.add_argument("--dry-run", action="store_true", help=_("Count what it would do; change nothing."))

    def handle(self, *args, **options):
        command_requires_dlq_inspector()
        stopping = []
        # A SIGTERM lets the batch under way commit, then stops: nothing half-written.
        previous = signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
        archive = None
        try:
            states = parse_states(options["state"])
            total = cleanup_queryset(older_than_days=options["older_than_days"], states=states).count()
            if options["archive"] and not options["dry_run"]:
                try:
                    archive = open(options["archive"], "a", encoding="utf-8")
                except OSError as exc:
                    raise CommandError(f"--archive: cannot write to {options['archive']}: {exc.strerror}") from None
            with tqdm(total=total, unit="dead letter", file=sys.stderr, disable=None) as bar:
                def progress(n):
                    bar.update(n)
                    if stopping:
                        raise KeyboardInterrupt
                result = cleanup_dead_letters(
                    older_than_days=options["older_than_days"], states=states, actor=current().actor,
                    archive=archive, purge=options["purge"], replay_retryable=options["replay_retryable"],
                    dry_run=options["dry_run"], batch_size=options["batch_size"], progress=progress)
        except DomainError as exc:
            field = exc.details.get("field", "")
            raise CommandError(f"--{field.replace('_', '-')}: {exc}" if field else str(exc)) from None
        except KeyboardInterrupt:
            self.stderr.write("stopped: the batches done so far are committed")
            return
        finally:
            signal.signal(signal.SIGTERM, previous)
            if archive is not None:
                archive.close()
        self._summary(result, options)

    def _summary(self, result, options) -> None:
        would = "would " if result.dry_run else ""
        parts = [f"{result.selected} dead letters selected"]
        if options["replay_retryable"]:
            parts.append(f"{would}replay {result.replayed}" + (f", {result.refused} refused" if result.refused else ""))
        if options["archive"]:
            parts.append(f"{would}archive {result.archived if not result.dry_run else result.selected} "
                         f"to {options['archive']}")
        if options["purge"]:
            parts.append(f"{would}purge {result.purged if not result.dry_run else result.selected}")
        self.stdout.write("; ".join(parts))
        for refusal in result.refusals:
            self.stdout.write(f"  refused: {refusal}")
