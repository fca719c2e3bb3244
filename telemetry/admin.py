"""The telemetry app's admin pages, each in a module of its own (imported here for autodiscovery)."""

from telemetry import alerts_admin  # noqa: F401
