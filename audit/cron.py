"""The audit app's periodic jobs, for `manage.py rqcron audit.cron` (rq 2.x cron): the stream
publisher's, and the prune of the REST API's idempotency keys.

A cron process of its own rather than a line in scheduling.cron: audit sits below scheduling and
imports none of it. The jobs go on the periodic jobs' queue (scheduling.queueing.PERIODIC_QUEUE,
named here as a string because of that; tests/audit/test_streaming.py checks the two agree),
whose worker `manage.py up` already runs. As in scheduling.cron, each copy lives at most one
interval on the queue (`ttl`), so a slow worker finds one copy waiting, not a pile.
"""

from django.conf import settings
from rq import cron

from audit.jobs import prune_idempotency_keys_job, prune_stream_job, publish_stream_job

PERIODIC_QUEUE = "scheduler"
PRUNE_INTERVAL = 600
# Keys are kept RETRYOPS_IDEMPOTENCY_KEEP_HOURS (at least 24): an hourly prune keeps the table
# within an hour of that.
IDEMPOTENCY_PRUNE_INTERVAL = 3600

for job, interval in ((publish_stream_job, settings.RETRYOPS_STREAM_INTERVAL), (prune_stream_job, PRUNE_INTERVAL),
                      (prune_idempotency_keys_job, IDEMPOTENCY_PRUNE_INTERVAL)):
    cron.register(job, queue_name=PERIODIC_QUEUE, interval=interval, ttl=interval)
