"""/metrics: retryops_alert_firing{alert}, 1 for each alert rule that is firing and 0 for the others,
and retryops_alert_evaluation_age_seconds, how long ago the evaluator last ran (so Prometheus can
say that it stopped, which the app cannot)."""

from django.utils import timezone
from prometheus_client.core import GaugeMetricFamily

from telemetry.alerts.models import Alert, AlertState
from telemetry.alerts.rules import RULES


class AlertCollector:
    """A collector for the /metrics registry (telemetry.metrics.registry): one query of the alerts'
    few rows per scrape."""

    def collect(self):
        rows = list(Alert.objects.values_list("rule", "state", "evaluated_at"))
        firing = {rule for rule, state, _at in rows if state == AlertState.FIRING}
        family = GaugeMetricFamily("retryops_alert_firing", "Whether each RetryOps alert is firing (1) or not (0).",
                                   labels=["alert"])
        # Every rule, also one not evaluated yet (no row): a series that appears only when it fires
        # could not tell "ok" from "not scraped".
        for name in RULES:
            family.add_metric([name], 1 if name in firing else 0)
        yield family
        age = GaugeMetricFamily("retryops_alert_evaluation_age_seconds",
                                "Seconds since the alert rules were last evaluated (never: absent).")
        last = max((at for _rule, _state, at in rows if at is not None), default=None)
        if last is not None:
            age.add_metric([], max(0.0, (timezone.now() - last).total_seconds()))
        yield age
