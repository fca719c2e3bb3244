"""The /metrics registry: a prometheus_client CollectorRegistry of its own (never the process-global
one, whose per-process counters would be wrong across workers and hosts), whose collectors are
listed in COLLECTORS. A collector is a plain object whose collect() yields metric families, read
from the database at each scrape; it must stay cheap (indexed or precomputed reads).

Other telemetry modules add theirs here: the acceptance figures, the alerts, the heartbeats, the
invariant checks /readyz runs and the read replica it reports."""

from collections import defaultdict

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily
from prometheus_client.exposition import choose_encoder
from prometheus_client.utils import floatToGoString

from telemetry.alerts.collector import AlertCollector
from telemetry.figures.selectors import AcceptanceCollector
from telemetry.health.heartbeats import HeartbeatCollector
from telemetry.metrics.gauges import StateCollector, pool_label, pool_names
from telemetry.metrics.rollup import (
    ATTEMPT_DURATION,
    COUNTERS,
    DEAD_LETTER_TO_WORK_ORDER,
    HISTOGRAMS,
    RETRY_LATENESS,
    counted_series,
)
from telemetry.metrics.watermark import WatermarkCollector
from telemetry.health.readiness import InvariantCollector, ReplicaCollector

COUNTER_HELP = {
    "task_retry_scheduled_total": "Retries scheduled (task.retry.scheduled events).",
    "task_retry_success_total": "Retries that succeeded (task.retry.succeeded events: attempt 2 or later).",
    "task_retry_failure_total": "Retries that failed (attempt 2 or later), whether retried again or dead.",
    "task_retry_dlq_total": "Tasks that died into the dead-letter queue (task.dead events).",
    "task_retry_escalated_total": "Dead letters collected onto a work order (opened or joined).",
}
HISTOGRAM_HELP = {
    ATTEMPT_DURATION: "How long attempts ran, by outcome.",
    RETRY_LATENESS: "How late retries started: actual start minus due time.",
    DEAD_LETTER_TO_WORK_ORDER: "From a task's death to its dead letter on a work order.",
}
# Each histogram's labels beyond flow (a series' third label, when it has one, is its `label`).
HISTOGRAM_LABELS = {
    ATTEMPT_DURATION: ["flow", "pool", "outcome"],
    RETRY_LATENESS: ["flow", "pool"],
    DEAD_LETTER_TO_WORK_ORDER: ["flow"],
}


class CountedCollector:
    """The counters (task_retry_*_total) and histograms counted from the database's rows: the
    rollup plus the rows since it (telemetry.metrics.rollup), in one query."""

    def collect(self):
        names = pool_names()
        counters = {name: CounterMetricFamily(name, COUNTER_HELP[name], labels=["flow", "pool", "category"])
                    for name in COUNTERS}
        # Histogram rows by series: {labels: [(le, count)], ...} and their sums.
        buckets, sums = defaultdict(list), defaultdict(float)
        for row in counted_series():
            if row.metric in counters:
                counters[row.metric].add_metric([row.flow, pool_label(names, row.pool_id), row.label], row.count)
            elif row.metric in HISTOGRAMS:
                labels = [row.flow, pool_label(names, row.pool_id), row.label][:len(HISTOGRAM_LABELS[row.metric])]
                key = (row.metric, *labels)
                buckets[key].append((row.le, row.count))
                sums[key] += row.total
        yield from counters.values()
        histograms = {name: HistogramMetricFamily(name, HISTOGRAM_HELP[name], labels=HISTOGRAM_LABELS[name])
                      for name in HISTOGRAMS}
        for (metric, *labels), rows in sorted(buckets.items()):
            histograms[metric].add_metric(labels, _cumulative(HISTOGRAMS[metric], rows), sum_value=sums[(metric, *labels)])
        yield from histograms.values()


def _cumulative(bounds: tuple[float, ...], rows: list[tuple[float, int]]) -> list[tuple[str, float]]:
    """Prometheus' cumulative buckets from the rollup's per-bucket counts: the count at each bound
    is that of every row whose bound is at most it (rows stored under older bounds included), and
    +Inf counts them all. Rows of one series may repeat a bound (several pools merged)."""
    cumulative = [(floatToGoString(bound), sum(n for le, n in rows if le <= bound)) for bound in bounds]
    return [*cumulative, ("+Inf", sum(n for _le, n in rows))]


# The collectors of /metrics, in the order they are exposed.
COLLECTORS = (
    CountedCollector(),
    StateCollector(),
    WatermarkCollector(),
    HeartbeatCollector(),
    AcceptanceCollector(),
    AlertCollector(),
    InvariantCollector(),
    ReplicaCollector(),
)


def build_registry(collectors=COLLECTORS) -> CollectorRegistry:
    """A registry of its own holding `collectors`; none is read until a scrape (no describe())."""
    registry = CollectorRegistry(auto_describe=False)
    for collector in collectors:
        registry.register(collector)
    return registry


REGISTRY = build_registry()


def exposition(accept: str) -> tuple[bytes, str]:
    """The registry's text, in the format `accept` asks for (OpenMetrics or Prometheus' text
    format 0.0.4), and its content type."""
    encoder, content_type = choose_encoder(accept)
    return encoder(REGISTRY), content_type
