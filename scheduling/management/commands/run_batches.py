from django.core.management.base import no_translations
from django.utils.translation import gettext_lazy as _

from audit.management.base import AuditedCommand
from scheduling import services


class Command(AuditedCommand):
    help = _("Run one tick of every enabled batch config (what the periodic batch job does). A config that fails "
             "is named on stderr and recorded on the config (last_error); the others tick all the same.")

    @no_translations  # the error a config's tick records (last_error) is stored, so untranslated
    def handle(self, *args, **options):
        ticks = services.run_batches()
        for name, started in ticks.started.items():
            self.stdout.write(f"{name}: {started} task(s) started")
        for name, error in ticks.failed.items():
            self.stderr.write(self.style.ERROR(f"{name} failed: {error}"))
        summary = f"{sum(ticks.started.values())} task(s) started by {len(ticks.started)} batch config(s)"
        if ticks.failed:
            summary += f"; {len(ticks.failed)} failed"
        self.stdout.write(self.style.SUCCESS(summary))
