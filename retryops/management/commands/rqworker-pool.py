"""django-rq's rqworker-pool, refusing to start against a database that lacks a migration."""

import importlib

from retryops.migrated import refuse_unmigrated

RQWorkerPool = importlib.import_module("django_rq.management.commands.rqworker-pool").Command


class Command(RQWorkerPool):
    def handle(self, *args, **options):
        refuse_unmigrated()
        return super().handle(*args, **options)
