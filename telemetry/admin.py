"""The telemetry app's admin pages, each in a module of its own (imported here for autodiscovery)."""

from telemetry.alerts import admin  # noqa: F401
