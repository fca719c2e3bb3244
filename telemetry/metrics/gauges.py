"""The gauges of /metrics: what the database holds now.

Gauges whose query groups rows that can number hundreds of thousands (resources by pool and
state, waiting tasks, running attempts, open dead letters) are counted by each rollup pass
(every 5 seconds, in the ops process) into MetricGauge, so a scrape reads a few dozen
rows: grouping 100,000 resources alone costs about 20 ms, the budget of a whole collector (see
bench/metrics.py). The others are small indexed reads made at each scrape: overdue retries
(task_waiting_due_idx), live work orders and their SLA clocks (work_order_live_idx), failed
notifications (notification_failed_idx). retryops_metrics_rollup_age_seconds says how old the
counted ones are, so a stopped rollup is seen rather than read as a steady state."""

from datetime import datetime

from django.db.models import Count
from django.utils import timezone
from prometheus_client.core import GaugeMetricFamily

from compensation.choices import WORK_ORDER_LIVE
from compensation.notifications.models import (
    Notification,
    NotificationChannel,
    NotificationState,
)
from compensation.selectors import dead_letter_queue_by_flow, live_work_order_board
from compensation.work_orders.models import SLA_CLOCKS
from resources.choices import ResourceState
from resources.models import ResourcePool
from resources.selectors import pool_state_counts
from scheduling.choices import WAITING_STATES, AttemptOutcome
from scheduling.models import Attempt, Task
from scheduling.services.recovery import OVERDUE_GRACE
from telemetry.metrics.models import MetricGauge, MetricWatermark

# The gauges each rollup pass counts: name -> (help, labels).
COUNTED_GAUGES = {
    "retryops_tasks_waiting": ("Tasks waiting for their next attempt, by state.", ["flow", "pool", "state"]),
    "retryops_attempts_running": ("Attempts running now.", ["flow", "pool"]),
    "retryops_dlq_length": ("Open dead letters (the dead-letter queue).", ["flow"]),
    "retryops_resources": ("Resources by pool and state.", ["pool", "state"]),
}


def pool_names() -> dict[int, str]:
    """Every pool's name by id: the `pool` label (one small query; pools are few)."""
    return dict(ResourcePool.objects.values_list("id", "name"))


def pool_label(names: dict[int, str], pool_id: int) -> str:
    """A pool's name, or a stand-in for one removed since its rows were counted."""
    return names.get(pool_id) or f"removed-pool-{pool_id}"


def overdue_retries(*, due_before: datetime) -> int:
    """Waiting tasks due before `due_before` (task_waiting_due_idx): /metrics and the retries_overdue alert."""
    return Task.objects.filter(state__in=WAITING_STATES, next_run_at__lt=due_before).count()


def rollup_age(now: datetime) -> float | None:
    """Seconds since the metrics rollup's last pass (None: no pass yet): /metrics and the
    metrics_rollup_stale alert."""
    passed = MetricWatermark.objects.filter(pk=1).values_list("advanced_at", flat=True).first()
    return None if passed is None else max(0.0, (now - passed).total_seconds())


def counted_gauges() -> list[MetricGauge]:
    """The samples of COUNTED_GAUGES as the database holds them now (what a rollup pass stores)."""
    names = pool_names()
    rows = []
    waiting = (Task.objects.filter(state__in=WAITING_STATES).values_list("flow", "pool_id", "state")
               .annotate(n=Count("*")).order_by())
    rows += [("retryops_tasks_waiting", {"flow": flow, "pool": pool_label(names, pool), "state": state}, n)
             for flow, pool, state, n in waiting]
    running = (Attempt.objects.filter(outcome=AttemptOutcome.RUNNING).values_list("task__flow", "task__pool_id")
               .annotate(n=Count("*")).order_by())
    rows += [("retryops_attempts_running", {"flow": flow, "pool": pool_label(names, pool)}, n)
             for flow, pool, n in running]
    rows += [("retryops_dlq_length", {"flow": row["flow"]}, row["open"]) for row in dead_letter_queue_by_flow()]
    counts = pool_state_counts()
    rows += [("retryops_resources", {"pool": pool_label(names, pool), "state": state},
              counts.get(pool, {}).get(state, 0))
             for pool in sorted(names.keys() | counts.keys()) for state in ResourceState.values]
    return [MetricGauge(metric=metric, labels=labels, value=value) for metric, labels, value in rows]


class StateCollector:
    """The gauges: those the rollup counted (COUNTED_GAUGES) and retryops_metrics_rollup_age_seconds,
    then retryops_retries_overdue, retryops_work_orders_open, retryops_sla_breaches and
    retryops_notifications_failed, read now."""

    def collect(self):
        now = timezone.now()
        yield from self._counted(now)
        yield self._overdue(now)
        yield from self._work_orders(now)
        yield self._notifications()

    def _counted(self, now):
        families = {name: GaugeMetricFamily(name, help_text, labels=labels)
                    for name, (help_text, labels) in COUNTED_GAUGES.items()}
        for metric, labels, value in MetricGauge.objects.order_by("id").values_list("metric", "labels", "value"):
            family = families.get(metric)
            if family is not None:
                family.add_metric([labels.get(label, "") for label in COUNTED_GAUGES[metric][1]], value)
        yield from families.values()
        age = GaugeMetricFamily("retryops_metrics_rollup_age_seconds",
                                "Seconds since the metrics rollup last counted the gauges above (no pass yet: absent).")
        seconds = rollup_age(now)
        if seconds is not None:
            age.add_metric([], seconds)
        yield age

    def _overdue(self, now):
        overdue = overdue_retries(due_before=now - OVERDUE_GRACE)
        return GaugeMetricFamily(
            "retryops_retries_overdue",
            f"Waiting tasks due more than {OVERDUE_GRACE.total_seconds():g} s ago (the dispatcher's grace): "
            "workers behind or missing.", value=overdue)

    def _work_orders(self, now):
        board = live_work_order_board(now=now, limit=0)
        live = GaugeMetricFamily("retryops_work_orders_open", "Live work orders (open, acknowledged, in progress).",
                                 labels=["state"])
        for state in WORK_ORDER_LIVE:
            live.add_metric([state], board["by_state"][state])
        yield live
        breaches = GaugeMetricFamily("retryops_sla_breaches", "Live work orders past each SLA clock.",
                                     labels=["clock"])
        for clock in SLA_CLOCKS:
            breaches.add_metric([clock], board["past_by_clock"][clock])
        yield breaches

    def _notifications(self):
        family = GaugeMetricFamily("retryops_notifications_failed",
                                   "Notifications that stayed failed (Slack, PagerDuty).", labels=["channel"])
        failed = dict(Notification.objects.filter(state=NotificationState.FAILED).values_list("channel")
                      .annotate(n=Count("*")).order_by())
        for channel in NotificationChannel.values:
            family.add_metric([channel], failed.get(channel, 0))
        return family

