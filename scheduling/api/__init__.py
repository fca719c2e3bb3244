"""Scheduling's REST endpoints. Part 1: a resource's atomic reset-and-retry and its retry history
(here, not in resources/api: they call scheduling, which the resource pool never imports)."""
