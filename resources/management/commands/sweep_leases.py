from django.core.management.base import CommandError
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from audit.management.base import AuditedCommand
from resources import services
from retryops.errors import DomainError


class Command(AuditedCommand):
    help = _("Take back resources whose lease has expired: a used lease becomes a failure (retryable, "
             "'lease expired'); an unused one (reserved, held, a probe's) goes back without counting one.")

    def add_arguments(self, parser):
        parser.add_argument("--limit", type=int, default=1000, help=gettext("Most leases to sweep in one run (default 1000)."))

    def handle(self, *args, limit, **options):
        try:
            swept = services.sweep_expired_leases(limit=limit, actor="sweep_leases command")
        except DomainError as exc:
            raise CommandError(str(exc)) from None
        for lease in swept:
            use = "" if lease.used else f" (unused {lease.lease_kind}, no failure counted)"
            self.stdout.write(f"swept resource {lease.resource_id}: lease of {lease.holder} ended "
                              f"{lease.leased_until:%Y-%m-%d %H:%M:%S}{use}")
        self.stdout.write(self.style.SUCCESS(f"{len(swept)} expired lease(s) swept"))
