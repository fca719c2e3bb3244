from django.core.management.base import BaseCommand

from resources import services


class Command(BaseCommand):
    help = "Take back resources whose lease has expired: they become failed (retryable, 'lease expired')."

    def add_arguments(self, parser):
        parser.add_argument("--limit", type=int, default=1000, help="Most leases to sweep in one run (default 1000).")

    def handle(self, *args, limit, **options):
        swept = services.sweep_expired_leases(limit=limit, actor="sweep_leases command")
        for lease in swept:
            self.stdout.write(f"swept resource {lease.resource_id}: lease of {lease.holder} ended {lease.leased_until:%Y-%m-%d %H:%M:%S}")
        self.stdout.write(self.style.SUCCESS(f"{len(swept)} expired lease(s) swept"))
