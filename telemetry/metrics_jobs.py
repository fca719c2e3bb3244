"""Where telemetry/cron.py and telemetry/urls.py import roll_up_metrics_job from; see telemetry.metrics.jobs."""

from telemetry.metrics.jobs import roll_up_metrics_job  # noqa: F401
