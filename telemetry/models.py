"""The telemetry app's rows: metric rollups and alerts (each in a module of its own, imported here)."""
