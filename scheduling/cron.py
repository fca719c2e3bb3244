"""Periodic jobs for `manage.py rqcron scheduling.cron` (rq 2.x cron).

They go on a queue of their own, which a worker of its own serves (`manage.py up`), so a flow
backlog never delays the sweeper, lost-worker recovery or batch ticks. rq's cron enqueues on
time whether or not the last copy has run, and has no option to skip a job already queued: each
copy lives at most one interval on the queue (`ttl`), by when a newer one is queued, so a worker
that falls behind finds one copy waiting, not one per missed interval.
"""

from django.conf import settings
from rq import cron

from scheduling.jobs import batch_tick_job, dispatch_job
from scheduling.queueing import PERIODIC_QUEUE

for job, interval in ((dispatch_job, settings.RETRYOPS_DISPATCH_INTERVAL),
                      (batch_tick_job, settings.RETRYOPS_BATCH_INTERVAL)):
    cron.register(job, queue_name=PERIODIC_QUEUE, interval=interval, ttl=interval)
