from django.utils.translation import gettext_lazy as _

from audit.management.base import AuditedCommand
from retryops.language import in_stored_language
from scheduling import services


class Command(AuditedCommand):
    help = _("Recover attempts whose worker died (expired leases), start due probation probes, and enqueue again "
             "every waiting task that has no live RQ job. The database is the source of truth; this makes Redis "
             "match it.")

    @in_stored_language  # as the periodic job does: what the run records is stored
    def handle(self, *args, **options):
        counts = services.run_dispatcher()
        self.stdout.write(self.style.SUCCESS(
            f"{counts['abandoned']} lost attempt(s) abandoned, {counts['probes']} probe(s) started, "
            f"{counts['enqueued']} task(s) enqueued"))
