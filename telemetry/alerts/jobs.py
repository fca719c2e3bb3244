"""The periodic job that evaluates the alert rules (the ops process, every EVALUATE_ALERTS_EVERY seconds)."""

from retryops.language import in_stored_language
from telemetry.alerts.services import evaluate_alerts

EVALUATE_ALERTS_EVERY = 30


@in_stored_language
def evaluate_alerts_job() -> dict:
    """Periodic: evaluate every alert rule; a rule that fails is in the result and the log, not
    raised (the next run tries again)."""
    return evaluate_alerts().as_dict()
