"""The compensation admin."""

from compensation import admin_runbooks  # noqa: F401  (runbooks: suggested on work orders, runs; keep last)
