"""Periodic jobs for `manage.py rqcron compensation.cron`, on the periodic queue (see
scheduling.cron for why each copy lives at most one interval): the dead-letter consumer every few
seconds, so a process that died between a task's death and its dead letter loses nothing, the
retention clean-up, the notifications that are due (a retry after backoff, or a send whose
after-commit job was lost), and escalation (missed dead letters, orphaned ones, failed notifications, SLA breaches)."""

from django.conf import settings
from rq import cron

from compensation.jobs import dead_letters_job, dlq_cleanup_job, escalate_job
from compensation.jobs_notifications import send_notifications_job
from scheduling.queueing import PERIODIC_QUEUE

for job, interval in ((dead_letters_job, settings.RETRYOPS_DEAD_LETTER_INTERVAL),
                      (dlq_cleanup_job, settings.RETRYOPS_DLQ_CLEANUP_INTERVAL),
                      (send_notifications_job, settings.RETRYOPS_NOTIFY_INTERVAL),
                      (escalate_job, settings.RETRYOPS_ESCALATE_INTERVAL)):
    cron.register(job, queue_name=PERIODIC_QUEUE, interval=interval, ttl=interval)
