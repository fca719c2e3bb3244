"""Where telemetry/cron.py and telemetry/urls.py import metrics_view from; see telemetry.metrics.access."""

from telemetry.metrics.access import metrics_view  # noqa: F401
