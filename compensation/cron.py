"""Periodic jobs for `manage.py rqcron compensation.cron`, on the periodic queue (see
scheduling.cron for why each copy lives at most one interval): the dead-letter consumer every few
seconds, so a process that died between a task's death and its dead letter loses nothing, and
the retention clean-up."""

from django.conf import settings
from rq import cron

from compensation.jobs import dead_letters_job, dlq_cleanup_job
from scheduling.queueing import PERIODIC_QUEUE

for job, interval in ((dead_letters_job, settings.RETRYOPS_DEAD_LETTER_INTERVAL),
                      (dlq_cleanup_job, settings.RETRYOPS_DLQ_CLEANUP_INTERVAL)):
    cron.register(job, queue_name=PERIODIC_QUEUE, interval=interval, ttl=interval)
