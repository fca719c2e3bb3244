from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class TelemetryConfig(AppConfig):
    """Metrics, the acceptance figures, alerts and health: reads every app below it, owned by none."""

    name = "telemetry"
    verbose_name = _("Telemetry and alerts")

    def ready(self):
        from telemetry.logs import configure_structlog

        configure_structlog()
