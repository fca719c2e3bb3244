"""django-rq's rqworker, refusing to start against a database that lacks a migration, and waiting
for Redis when it does not answer at start (retryops.redis_wait; its WaitsForRedis mixin makes the
worker class wait during a run)."""

import logging

from django_rq import get_connection
from django_rq.management.commands.rqworker import Command as RQWorker

from retryops.migrated import refuse_unmigrated
from retryops.redis_wait import answers, wait_for_redis


class Command(RQWorker):
    def handle(self, *args, **options):
        refuse_unmigrated()
        # The queues of one worker share one connection (django-rq refuses others).
        connection = get_connection(args[0] if args else "default")
        if not answers(connection):
            # SIGTERM's default action stops this wait: nothing is registered yet.
            wait_for_redis(connection, logging.getLogger("rq.worker"))
        return super().handle(*args, **options)
