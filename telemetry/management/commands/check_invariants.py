"""Check the invariants the services keep, from the shell or a cron; see telemetry.health.invariants."""

import json

from django.core.management.base import BaseCommand, CommandError
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from telemetry.health.invariants import CHECKS, DEEP, DEFAULT_LIMIT, check_invariants


class Command(BaseCommand):
    @property
    def help(self) -> str:
        # Read when the parser is made (argparse needs a str, not a lazy translation).
        return gettext("Check the invariants the services keep: every in-use resource has one live holder, no "
                       "resource is held twice, waiting tasks will be dispatched, every dead task has its dead "
                       "letter and work order, operator actions have their audit rows. Prints each violation with "
                       "its ids, grouped by check, and exits non-zero when there is one. Read-only.")

    def add_arguments(self, parser):
        parser.add_argument("--check", action="append", choices=list(CHECKS), metavar="NAME",
                            help=_("Run only this check (repeatable): %(choices)s.") % {"choices": ", ".join(CHECKS)})
        parser.add_argument("--deep", action="store_true",
                            help=_("Also run the full-scan checks (%(deep)s) and read dead letters back to their "
                                   "retention instead of one day.") % {"deep": ", ".join(sorted(DEEP))})
        parser.add_argument("--json", action="store_true", help=_("Print one JSON document instead of lines."))
        parser.add_argument("--limit", type=int, default=DEFAULT_LIMIT,
                            help=_("Print at most this many violations per check (all are counted)."))

    def handle(self, *args, **options):
        if options["limit"] < 1:
            raise CommandError(gettext("--limit must be at least 1, got %(limit)s") % {"limit": options["limit"]})
        results = check_invariants(names=options["check"], deep=options["deep"], limit=options["limit"])
        total = sum(r.count for r in results)
        if options["json"]:
            self.stdout.write(json.dumps({"ok": total == 0, "violations": total,
                                          "checks": [r.as_dict() for r in results]}, indent=2, default=str))
        else:
            for result in results:
                self.stdout.write(f"{result.name}: " + ("ok" if not result.count else f"{result.count} violation(s)"))
                for violation in result.violations:
                    self.stdout.write(f"  {violation.line()}")
                if result.count > len(result.violations):
                    self.stdout.write(f"  ... and {result.count - len(result.violations)} more")
        if total:
            raise CommandError(f"{total} invariant violation(s)", returncode=1)
