from django.utils.translation import gettext_lazy as _

from audit.management.base import AuditedCommand
from retryops.language import in_stored_language
from scheduling import services


class Command(AuditedCommand):
    help = _("Run one tick of every enabled batch config (what the periodic batch job does). A config that fails "
             "is named on stderr and recorded on the config (last_error); the others tick all the same.")

    @in_stored_language  # as the periodic job does: what the run records is stored
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
