"""Where telemetry/cron.py and telemetry/urls.py import refresh_figures_job from; see telemetry.figures.services."""

from telemetry.figures.services import refresh_figures_job  # noqa: F401
