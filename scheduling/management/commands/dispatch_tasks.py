from django.core.management.base import no_translations
from django.utils.translation import gettext_lazy as _

from audit.management.base import AuditedCommand
from scheduling import services


class Command(AuditedCommand):
    help = _("Recover attempts whose worker died (expired leases), start due probation probes, and enqueue again "
             "every waiting task that has no live RQ job. The database is the source of truth; this makes Redis "
             "match it.")

    @no_translations  # what it records (a probe's postponement, a task's note) is stored, so untranslated
    def handle(self, *args, **options):
        counts = services.run_dispatcher()
        self.stdout.write(self.style.SUCCESS(
            f"{counts['abandoned']} lost attempt(s) abandoned, {counts['probes']} probe(s) started, "
            f"{counts['enqueued']} task(s) enqueued"))
