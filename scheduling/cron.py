"""Periodic jobs for `manage.py rqcron scheduling.cron` (rq 2.x cron)."""

from django.conf import settings
from rq import cron

from scheduling.jobs import batch_tick_job, dispatch_job

cron.register(dispatch_job, queue_name="scheduler", interval=settings.RETRYOPS_DISPATCH_INTERVAL)
cron.register(batch_tick_job, queue_name="scheduler", interval=settings.RETRYOPS_BATCH_INTERVAL)
