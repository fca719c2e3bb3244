"""The telemetry app's rows: metric rollups and alerts (each in a module of its own, imported here)."""

from telemetry.figures_models import AcceptanceSnapshot  # noqa: E402, F401  (the acceptance figures: their own module)
