"""The telemetry app's rows: metric rollups, the acceptance figures' snapshot and alerts (each in a
module of its own, imported here)."""

from telemetry.alerts.models import Alert, AlertEvent
from telemetry.figures.models import AcceptanceSnapshot
from telemetry.metrics.models import MetricGauge, MetricRollup, MetricWatermark

__all__ = ["Alert", "AlertEvent", "AcceptanceSnapshot", "MetricGauge", "MetricRollup", "MetricWatermark"]
