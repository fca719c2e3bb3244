"""retryops_alert_firing{alert} for /metrics: 1 for each alert rule that is firing, 0 for the others."""

from prometheus_client.core import GaugeMetricFamily

from telemetry.alerts_models import Alert, AlertState
from telemetry.alerts_rules import RULES


class AlertCollector:
    """A collector for telemetry.metrics' registry: one query of the alerts' few rows per scrape."""

    def collect(self):
        firing = set(Alert.objects.filter(state=AlertState.FIRING).values_list("rule", flat=True))
        family = GaugeMetricFamily("retryops_alert_firing", "Whether each RetryOps alert is firing (1) or not (0).",
                                   labels=["alert"])
        # Every rule, also one not evaluated yet (no row): a series that appears only when it fires
        # could not tell "ok" from "not scraped".
        for name in RULES:
            family.add_metric([name], 1 if name in firing else 0)
        yield family
