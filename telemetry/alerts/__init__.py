"""Alerts: the rules (rules), their state and history (models), their evaluation (services), and how the console, /metrics and Prometheus show them."""
