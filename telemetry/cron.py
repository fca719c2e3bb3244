"""Periodic jobs for `manage.py rqcron telemetry.cron` (rq 2.x cron), on the periodic queue, whose
worker `manage.py up` runs (see scheduling.cron for why each copy lives at most one interval):
the metrics rollup every RETRYOPS_METRICS_ROLLUP_INTERVAL seconds, the acceptance figures'
snapshot every RETRYOPS_FIGURES_REFRESH_SECONDS and the alerts' evaluation every
RETRYOPS_ALERT_INTERVAL. A cron of its own because telemetry sits above every app and none of
their crons may name it."""

from django.conf import settings
from rq import cron

from scheduling.queueing import PERIODIC_QUEUE
from telemetry.alerts_jobs import evaluate_alerts_job
from telemetry.figures_services import refresh_figures_job
from telemetry.metrics_jobs import roll_up_metrics_job

for job, interval in ((roll_up_metrics_job, settings.RETRYOPS_METRICS_ROLLUP_INTERVAL),
                      (refresh_figures_job, settings.RETRYOPS_FIGURES_REFRESH_SECONDS),
                      (evaluate_alerts_job, settings.RETRYOPS_ALERT_INTERVAL)):
    cron.register(job, queue_name=PERIODIC_QUEUE, interval=interval, ttl=interval)
