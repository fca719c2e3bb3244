"""One escalation run from the shell; see compensation.services.escalation."""

from django.core.management.base import CommandError
from django.utils.text import format_lazy
from django.utils.translation import gettext_lazy as _

from audit.management.base import AuditedCommand
from compensation.services.escalation import escalate
from compensation.services.escalation import STEPS
from retryops.errors import DomainError


class Command(AuditedCommand):
    help = _("Run the escalation the ops process runs every minute: give "
             "open dead letters without a live work order one, queue failed notifications again (after RETRYOPS_NOTIFY_RESEND_AFTER seconds, at "
             "most RETRYOPS_NOTIFY_MAX_RESENDS times each), and mark and page SLA breaches (notice, "
             "acknowledge, compensate) once. Prints a summary; exits non-zero when a step or a row failed. "
             "--dry-run only counts.")

    def add_arguments(self, parser):
        parser.add_argument("--steps", default=",".join(STEPS),
                            help=format_lazy(_("Comma-separated steps to run, in this order whatever the order "
                                               "given ({steps}); default all."), steps=", ".join(STEPS)))
        parser.add_argument("--dry-run", action="store_true", help=_("Count what it would do; change nothing."))

    def handle(self, *args, **options):
        try:
            result = escalate(steps=options["steps"], dry_run=options["dry_run"])
        except DomainError as exc:
            field = exc.details.get("field", "")
            raise CommandError(f"--{field.replace('_', '-')}: {exc}" if field else str(exc)) from None
        would = "would " if result.dry_run else ""
        said = {
            "work_orders": f"work orders: {would}give {result.orphans} open dead letters one "
                           f"({result.work_orders} work orders)",
            "notifications": f"notifications: {would}send {result.resent} failed ones again",
            "breaches": f"SLA breaches: {would}mark "
                        + ", ".join(f"{count} {clock}" for clock, count in result.breaches.items()),
        }
        self.stdout.write(("dry run: " if result.dry_run else "") + "; ".join(said[step] for step in result.steps))
        if result.failures:
            for failure in result.failures:
                self.stderr.write(f"  failed: {failure}")
            raise CommandError(f"{len(result.failures)} escalation step(s) or row(s) failed; the rest ran (see above)")
