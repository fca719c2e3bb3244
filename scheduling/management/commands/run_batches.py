from django.core.management.base import BaseCommand

from scheduling import services


class Command(BaseCommand):
    help = "Run one tick of every enabled batch config (what the periodic batch job does)."

    def handle(self, *args, **options):
        counts = services.run_batches()
        for name, started in counts.items():
            self.stdout.write(f"{name}: {started} task(s) started")
        self.stdout.write(self.style.SUCCESS(f"{sum(counts.values())} task(s) started by {len(counts)} batch config(s)"))
