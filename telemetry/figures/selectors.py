"""The acceptance figures (issue 11): the operators' targets as numbers over a window, read from
the rows, with the rows behind each. Reads only; the admin page (telemetry.figures.admin) shows
them, and AcceptanceCollector exports the snapshot the periodic job keeps of them
(telemetry.figures.services) as gauges.

The figures and what exactly they count (a window is `since` to `until`, both included):

- retry success rate (target >= 90%): of the retries (attempt 2 and up) that ended in the window,
  the share that succeeded: scheduling.selectors.retry_outcomes, the ops dashboard's count.
- retries started within their SLA: of the retries due in the window, the share that started no
  later than their due time plus RETRYOPS_RETRY_SLA_GRACE_SECONDS. Those still waiting past that
  count as late (scheduling.selectors.retry_starts and overdue_retries say why).
- dead letter -> work order (p50, p99; target: the notice SLA, 5 minutes): per work order opened
  by dead letters whose first dead letter died in the window, from that death to the first
  trigger page sent about it. The operators' criterion is "a work order created and the on-call
  notified within 5 minutes"; the page is sent after the work order is opened, so its time covers
  both, and it is where the notice SLA clock stops too (compensation.services.escalation). A
  work order nobody has been paged about yet counts with the time it has waited so far, so failed
  pages raise the figure instead of leaving it.
- work order -> compensated (p50, p99; target: the compensate SLA): per work order compensated
  in the window, from its opening to its compensation.
- compensation completion rate (target >= 95%): of the work orders whose compensate SLA ran out in
  the window (so each has had its whole SLA), the cancelled ones aside, the share compensated or
  closed before it ran out.

Percentiles are PostgreSQL's percentile_cont (linear interpolation between the two nearest rows).
No row in the window is "no data" (None), never 0% or 100%.
"""

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import (
    Aggregate,
    Count,
    DurationField,
    ExpressionWrapper,
    F,
    FloatField,
    Func,
    Value,
)
from django.db.models.functions import Coalesce
from django.utils import timezone
from prometheus_client.core import GaugeMetricFamily

from compensation import selectors as compensation
from scheduling import selectors as scheduling

# The operators' targets (seed 003: 自动重试成功率 ≥ 90%, 人工补偿完成率 ≥ 95%). The criterion
# "重试延迟符合 SLA" names no share: ours is 99%, room for a worker restart now and then.
RETRY_SUCCESS_TARGET = 0.90
RETRY_WITHIN_SLA_TARGET = 0.99
COMPLETION_TARGET = 0.95
# The windows the figures page offers, in seconds, with the setting's own when it is another.
WINDOWS = (3600, 86400, 7 * 86400)
# Seconds between the ops process's refreshes of the /metrics gauges' snapshot (services).
REFRESH_FIGURES_EVERY = 60


class Percentile(Aggregate):
    """PostgreSQL's percentile_cont(fraction) WITHIN GROUP (ORDER BY expression)."""

    function = "percentile_cont"
    template = "%(function)s(%(fraction)s) WITHIN GROUP (ORDER BY %(expressions)s)"
    output_field = FloatField()

    def __init__(self, expression, fraction: float, **extra):
        if not 0 <= fraction <= 1:
            raise ValueError(f"fraction must be between 0 and 1, got {fraction!r}")
        super().__init__(expression, fraction=repr(float(fraction)), **extra)


def _seconds(end, start):
    return Func(ExpressionWrapper(end - start, output_field=DurationField()), template="EXTRACT(EPOCH FROM %(expressions)s)",
                output_field=FloatField())


@dataclass(frozen=True)
class Window:
    """`seconds` up to `until`."""

    seconds: int
    until: datetime

    @property
    def since(self) -> datetime:
        return self.until - timedelta(seconds=self.seconds)


@dataclass(frozen=True)
class Figure:
    """One acceptance figure: its value (a ratio from 0 to 1, or seconds; None: no data), its
    target, whether it meets it (None: no data), and the counts it is made of."""

    key: str
    value: float | None
    target: float
    # "at_least" for a ratio, "at_most" for a time.
    compare: str
    counts: dict = field(default_factory=dict)

    @property
    def met(self) -> bool | None:
        if self.value is None:
            return None
        return self.value >= self.target if self.compare == "at_least" else self.value <= self.target


def _ratio(part: int, whole: int) -> float | None:
    return None if not whole else part / whole


def retry_success(window: Window) -> Figure:
    outcomes = scheduling.retry_outcomes(since=window.since, until=window.until)
    ended = sum(outcomes.values())
    return Figure("retry_success_ratio", _ratio(outcomes["succeeded"], ended), RETRY_SUCCESS_TARGET, "at_least",
                  {"succeeded": outcomes["succeeded"], "ended": ended})


def retry_within_sla(window: Window, *, now: datetime) -> Figure:
    counts = scheduling.retry_start_counts(since=window.since, until=window.until)
    waiting = scheduling.overdue_retries(since=window.since, until=window.until, now=now).count()
    due = counts["started"] + waiting
    on_time = counts["started"] - counts["late"]
    return Figure("retry_within_sla_ratio", _ratio(on_time, due), RETRY_WITHIN_SLA_TARGET, "at_least",
                  {"on_time": on_time, "late": counts["late"], "waiting": waiting, "due": due})


def _percentiles(queryset, seconds) -> dict:
    return queryset.aggregate(count=Count("*"), p50=Percentile(seconds, 0.5), p99=Percentile(seconds, 0.99))


def dead_letter_to_work_order(window: Window, *, now: datetime) -> tuple[Figure, Figure]:
    orders = compensation.escalated_work_orders(since=window.since, until=window.until)
    row = _percentiles(orders, _seconds(Coalesce(F("paged_at"), Value(now)), F("first_dead_at")))
    paged = orders.filter(paged_at__isnull=False).count() if row["count"] else 0
    counts = {"work_orders": row["count"], "paged": paged, "not_paged": row["count"] - paged}
    target = float(settings.RETRYOPS_SLA_NOTICE_SECONDS)
    return (Figure("dead_letter_to_work_order_p50", row["p50"], target, "at_most", counts),
            Figure("dead_letter_to_work_order_p99", row["p99"], target, "at_most", counts))


def work_order_to_compensated(window: Window) -> tuple[Figure, Figure]:
    orders = compensation.compensated_work_orders(since=window.since, until=window.until)
    row = _percentiles(orders, _seconds(F("compensated_at"), F("created_at")))
    target = float(settings.RETRYOPS_SLA_COMPENSATE_SECONDS)
    counts = {"work_orders": row["count"]}
    return (Figure("work_order_to_compensated_p50", row["p50"], target, "at_most", counts),
            Figure("work_order_to_compensated_p99", row["p99"], target, "at_most", counts))


def compensation_completion(window: Window) -> Figure:
    due = compensation.work_orders_due(since=window.since, until=window.until)
    row = due.aggregate(due=Count("*"), completed=Count("pk", filter=compensation.completed_by_due()))
    return Figure("compensation_completion_ratio", _ratio(row["completed"], row["due"]), COMPLETION_TARGET,
                  "at_least", {"completed": row["completed"], "due": row["due"],
                               "not_completed": row["due"] - row["completed"]})


def acceptance_figures(*, seconds: int | None = None, now: datetime | None = None) -> dict[str, Figure]:
    """Every acceptance figure over the `seconds` (RETRYOPS_FIGURES_WINDOW_SECONDS) up to `now`, by
    key: a fixed number of queries, each on an index of its window's rows."""
    now = now or timezone.now()
    window = Window(seconds=seconds or settings.RETRYOPS_FIGURES_WINDOW_SECONDS, until=now)
    figures = [retry_success(window), retry_within_sla(window, now=now), *dead_letter_to_work_order(window, now=now),
               *work_order_to_compensated(window), compensation_completion(window)]
    return {figure.key: figure for figure in figures}


# The gauges of /metrics (spec11's names), from the figures' keys. The percentile is a label named
# `percentile`, not `quantile`: Prometheus reserves that for summaries (promtool check metrics refuses it
# on a gauge), and these are a window's figures computed by the database, not a summary's.
GAUGES = (
    ("retryops_retry_success_ratio", "Retries (attempt 2 and up) ended in the window that succeeded, 0-1.",
     {"": "retry_success_ratio"}),
    ("retryops_retry_within_sla_ratio", "Retries due in the window that started within their due time plus the "
     "grace, 0-1.", {"": "retry_within_sla_ratio"}),
    ("retryops_dead_letter_to_work_order_seconds", "First dead letter to the first page about its work order, "
     "work orders whose first dead letter died in the window.",
     {"p50": "dead_letter_to_work_order_p50", "p99": "dead_letter_to_work_order_p99"}),
    ("retryops_work_order_to_compensated_seconds", "Work order opened to compensated, work orders compensated "
     "in the window.", {"p50": "work_order_to_compensated_p50", "p99": "work_order_to_compensated_p99"}),
    ("retryops_compensation_completion_ratio", "Work orders whose compensate SLA ran out in the window that were "
     "compensated or closed by then, 0-1.", {"": "compensation_completion_ratio"}),
)


def latest_snapshot(*, seconds: int | None = None):
    """The periodic job's latest figures over `seconds` (RETRYOPS_FIGURES_WINDOW_SECONDS), or None
    when it has not run or its figures are older than five of its intervals: a job that stopped
    must not keep a target looking met. One row by its unique key."""
    from telemetry.models import AcceptanceSnapshot

    snapshot = AcceptanceSnapshot.objects.filter(
        window_seconds=seconds or settings.RETRYOPS_FIGURES_WINDOW_SECONDS).first()
    stale = timezone.now() - timedelta(seconds=5 * REFRESH_FIGURES_EVERY)
    return snapshot if snapshot is not None and snapshot.computed_at >= stale else None


class AcceptanceCollector:
    """The acceptance figures as gauges (no labels but the percentile), from the periodic job's
    snapshot: a scrape reads one row, whatever the number of attempts. No data (an empty window,
    or no fresh snapshot) is NaN, which no alert rule compares as met or missed."""

    def collect(self):
        snapshot = latest_snapshot()
        values = snapshot.figures if snapshot is not None else {}
        for name, documentation, keys in GAUGES:
            labels = ["percentile"] if "" not in keys else []
            gauge = GaugeMetricFamily(name, documentation, labels=labels)
            for percentile, key in keys.items():
                value = values.get(key)
                gauge.add_metric([percentile] if labels else [], float("nan") if value is None else float(value))
            yield gauge
