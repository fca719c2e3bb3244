"""The telemetry app's rows: metric rollups and alerts (each in a module of its own, imported here)."""

from telemetry.metrics_models import MetricGauge, MetricRollup, MetricWatermark

__all__ = ["MetricGauge", "MetricRollup", "MetricWatermark"]
