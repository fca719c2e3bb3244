"""Where telemetry/cron.py and telemetry/urls.py import evaluate_alerts_job from; see telemetry.alerts.jobs."""

from telemetry.alerts.jobs import evaluate_alerts_job  # noqa: F401
