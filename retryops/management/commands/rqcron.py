"""django-rq's rqcron (the periodic jobs' scheduler), refusing to start against a database that
lacks a migration, and waiting for Redis whenever it does not answer (retryops.redis_wait)."""

import logging

from django_rq.management.commands.rqcron import Command as RQCron

from retryops.migrated import refuse_unmigrated
from retryops.redis_wait import CronSchedulerWaitingForRedis


class Command(RQCron):
    def handle(self, *args, **options):
        refuse_unmigrated()
        # As django-rq's handle, with a scheduler that outlasts a Redis outage.
        scheduler = CronSchedulerWaitingForRedis(logging_level=getattr(logging, options["logging_level"]))
        self.stdout.write(f"Loading cron configuration from {options['config_path']}")
        scheduler.load_config_from_file(options["config_path"])
        self.stdout.write(self.style.SUCCESS(f"Starting cron scheduler with {len(scheduler.get_jobs())} jobs..."))
        scheduler.start()
