"""Runbooks: the procedures in config/runbooks/ (catalog), the actions they name (actions/), the runs
of those actions (models, services) and their pages in the console (admin)."""
