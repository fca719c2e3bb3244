"""/metrics: retryops_alert_firing{alert}, 1 for each alert rule that is firing and 0 for the others,
and retryops_alert_evaluation_age_seconds, how long ago the rule evaluated longest ago was (so
Prometheus can say that the evaluator, or one of its rules, stopped, which the app cannot)."""

from django.utils import timezone
from prometheus_client.core import GaugeMetricFamily

from telemetry.alerts.models import Alert, AlertState
from telemetry.alerts.rules import RULES


class AlertCollector:
    """A collector for the /metrics registry (telemetry.metrics.registry): one query of the alerts'
    few rows per scrape."""

    def collect(self):
        rows = list(Alert.objects.filter(rule__in=RULES).values_list("rule", "state", "since", "evaluated_at"))
        firing = {rule for rule, state, _since, _at in rows if state == AlertState.FIRING}
        family = GaugeMetricFamily("retryops_alert_firing", "Whether each RetryOps alert is firing (1) or not (0).",
                                   labels=["alert"])
        # Every rule, also one not evaluated yet (no row): a series that appears only when it fires
        # could not tell "ok" from "not scraped".
        for name in RULES:
            family.add_metric([name], 1 if name in firing else 0)
        yield family
        age = GaugeMetricFamily("retryops_alert_evaluation_age_seconds",
                                "Seconds since the rule evaluated longest ago was evaluated (none yet: absent).")
        # The oldest, not the newest: a rule that raises at every run keeps its last state while the
        # others run. One never evaluated ages from when its row was made.
        oldest = min((at or since for _rule, _state, since, at in rows), default=None)
        if oldest is not None:
            age.add_metric([], max(0.0, (timezone.now() - oldest).total_seconds()))
        yield age
