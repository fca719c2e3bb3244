from django.core.management.base import BaseCommand

from scheduling import services


class Command(BaseCommand):
    help = ("Recover attempts whose worker died (expired leases), start due probation probes, and enqueue again every waiting task "
            "that has no live RQ job. The database is the source of truth; this makes Redis match it.")

    def handle(self, *args, **options):
        abandoned = services.recover_lost_attempts()
        probes = services.start_probes()
        enqueued = services.dispatch_waiting()
        self.stdout.write(self.style.SUCCESS(
            f"{len(abandoned)} lost attempt(s) abandoned, {len(probes)} probe(s) started, {len(enqueued)} task(s) enqueued"))
