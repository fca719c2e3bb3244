"""django-rq's rqcron (the periodic jobs' scheduler), refusing to start against a database that
lacks a migration."""

from django_rq.management.commands.rqcron import Command as RQCron

from retryops.migrated import refuse_unmigrated


class Command(RQCron):
    def handle(self, *args, **options):
        refuse_unmigrated()
        return super().handle(*args, **options)
