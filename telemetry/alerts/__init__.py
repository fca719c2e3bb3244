"""Alerts: the rules (rules), their state and history (models), their evaluation (services), and how
the console (admin), /metrics (collector) and Prometheus (prometheus) show them."""
