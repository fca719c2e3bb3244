"""django-rq's rqworker, refusing to start against a database that lacks a migration."""

from django_rq.management.commands.rqworker import Command as RQWorker

from retryops.migrated import refuse_unmigrated


class Command(RQWorker):
    def handle(self, *args, **options):
        refuse_unmigrated()
        return super().handle(*args, **options)
