"""Alert rules: one small class per condition the on-call is paged about, in a registry (RULES).

Each rule reads one number (`read`): a count or a ratio, from the database or from the health
checks' heartbeats, with the facts behind it (counts, the window, what is silent). `describe` says
those facts in a sentence of the active language: in English when the evaluator stores it and
sends it (the job runs with translations off), in the reader's language in the admin. The
threshold comes from the settings; telemetry.alerts.services decides when an alert fires and resolves. A
rule that cannot judge (too few retries) reads no value.
"""

from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, ClassVar

from django.conf import settings
from django.db.models import Count
from django.urls import reverse
from django.utils.functional import Promise
from django.utils.translation import gettext, ngettext
from django.utils.translation import gettext_lazy as _

from compensation.choices import DeadLetterState
from compensation.models import DeadLetter
from compensation.notifications.models import Notification, NotificationState
from compensation.selectors import live_work_order_board
from compensation.services.escalation import orphaned_dead_letters
from scheduling.choices import TaskState
from scheduling.selectors import retry_outcomes, uncollected_dead_tasks
from telemetry.health import heartbeats
from telemetry.figures.selectors import COMPLETION_TARGET, RETRY_SUCCESS_TARGET, Figure, latest_snapshot
from telemetry.metrics.gauges import overdue_retries, rollup_age
from telemetry.metrics.watermark import watermark_lag

# The silent components an alert names (and how much of each name); it counts them all.
NAMES_KEPT = 20
MAX_NAME_LENGTH = 200


@dataclass(frozen=True)
class Reading:
    """What one evaluation of a rule saw: its value (None: nothing to judge) and the facts behind
    it (JSON: numbers, strings and lists of them), which the rule's `describe` says."""

    value: float | None
    facts: dict[str, Any] = field(default_factory=dict)


def seconds_words(seconds: int) -> str:
    """600 -> "10 min", 90 -> "90 s", 7200 -> "2 h": a window as the messages say it."""
    if seconds % 3600 == 0:
        return gettext("%(count)d h") % {"count": seconds // 3600}
    if seconds % 60 == 0:
        return gettext("%(count)d min") % {"count": seconds // 60}
    return gettext("%(count)d s") % {"count": seconds}


def age_words(seconds: int) -> str:
    """988 -> "16 min", 90 -> "90 s", 10000 -> "2 h": an age, rounded down to what a reader needs."""
    if seconds < 120:
        return seconds_words(seconds)
    return seconds_words(seconds - seconds % (60 if seconds < 7200 else 3600))


def dedup_key(rule: str) -> str:
    """The one dedup key of a rule's incidents: its trigger and its resolve share it."""
    return f"retryops/alert/{rule}"


class Rule:
    """Base of the registry's classes: a name (the dedup key's last part and the metric's label),
    a title in English (notifications) and in the reader's language (the admin), a unit, and
    where in the console the rows behind it are."""

    name: ClassVar[str]
    title: ClassVar[str]
    label: ClassVar[Promise]
    unit: ClassVar[str] = "count"  # or "ratio": shown as a percentage; or "seconds"
    severity: ClassVar[str] = "error"  # PagerDuty's: critical, error, warning, info

    def threshold(self) -> float:
        """It fires when its value is above this."""
        raise NotImplementedError

    def clear_level(self) -> float:
        """A firing alert resolves once its value has stayed at or below this (the hysteresis band
        lies between it and the threshold)."""
        return self.threshold() * settings.RETRYOPS_ALERT_CLEAR_RATIO

    def read(self, *, now: datetime) -> Reading:
        raise NotImplementedError

    def describe(self, facts: dict[str, Any]) -> str:
        """What a reading's facts mean, in the active language."""
        raise NotImplementedError

    def rows_url(self) -> str:
        """The console's list of what the alert is about."""
        raise NotImplementedError

    def shown(self, value: float | None) -> str:
        """A value as the messages write it: 23.3% for a ratio, 12 for a count."""
        if value is None:
            return "n/a"
        if self.unit == "seconds":
            return f"{value:.0f} s"
        return f"{value * 100:.1f}%" if self.unit == "ratio" else f"{value:g}"


class AnyRule(Rule):
    """A rule about things that should never happen: it fires at the first one, resolves at none."""

    def threshold(self) -> float:
        return 0


class RetryFailureRate(Rule):
    """The share of the retries that ended within the window that failed (another retry scheduled,
    or the task dead): scheduling.selectors.retry_outcomes, as the ops dashboard counts them."""

    name = "retry_failure_rate"
    title = "Retry failure rate"
    label = _("Retry failure rate")
    unit = "ratio"

    def threshold(self) -> float:
        return settings.RETRYOPS_ALERT_FAILURE_RATE

    def read(self, *, now: datetime) -> Reading:
        window = settings.RETRYOPS_ALERT_FAILURE_WINDOW_SECONDS
        outcomes = retry_outcomes(since=now - timedelta(seconds=window), until=now)
        ended, failed = sum(outcomes.values()), outcomes["failed"] + outcomes["dead"]
        facts = {"ended": ended, "failed": failed, "dead": outcomes["dead"], "window": window,
                 "needed": settings.RETRYOPS_ALERT_FAILURE_MIN_RETRIES}
        return Reading(failed / ended if ended >= facts["needed"] else None, facts)

    def describe(self, facts):
        if facts["ended"] < facts["needed"]:
            return ngettext("%(ended)d retry ended in the last %(window)s, fewer than the %(needed)d needed to judge",
                            "%(ended)d retries ended in the last %(window)s, fewer than the %(needed)d needed to "
                            "judge", facts["ended"]) % {**facts, "window": seconds_words(facts["window"])}
        return ngettext("%(failed)d of %(ended)d retry failed in the last %(window)s (%(dead)d of them dead)",
                        "%(failed)d of %(ended)d retries failed in the last %(window)s (%(dead)d of them dead)",
                        facts["ended"]) % {**facts, "window": seconds_words(facts["window"])}

    def rows_url(self) -> str:
        return reverse("admin:index")  # the ops dashboard: retries of the last 10 minutes and 24 hours


class DeadLetterQueueLength(Rule):
    """Open dead letters: the dead-letter queue an operator has to act on."""

    name = "dlq_length"
    title = "Dead-letter queue length"
    label = _("Dead-letter queue length")

    def threshold(self) -> float:
        return settings.RETRYOPS_ALERT_DLQ_LENGTH

    def read(self, *, now: datetime) -> Reading:
        # An index-only count of dead_letter_state_age_idx's open rows.
        count = DeadLetter.objects.filter(state=DeadLetterState.OPEN).count()
        return Reading(count, {"open": count})

    def describe(self, facts):
        return ngettext("%(open)d open dead letter", "%(open)d open dead letters", facts["open"]) % facts

    def rows_url(self) -> str:
        return reverse("admin:compensation_deadletter_changelist") + f"?state__exact={DeadLetterState.OPEN}"


class WorkOrderCreationFailed(AnyRule):
    """Dead letters nobody was given to act on, RETRYOPS_ALERT_WORK_ORDER_AFTER_SECONDS after their
    task died: dead tasks the dead-letter step has not collected (it makes the dead letter and its
    work order in the transaction that collects the task, so a failure leaves the task uncollected),
    and open dead letters without a live work order (escalation gives them one). Either is the step
    or escalation failing, and the operators' 5-minute notice running out."""

    name = "work_order_creation_failed"
    title = "Work order creation failed"
    label = _("Work order creation failed")
    severity = "critical"

    def read(self, *, now: datetime) -> Reading:
        after = settings.RETRYOPS_ALERT_WORK_ORDER_AFTER_SECONDS
        cutoff = now - timedelta(seconds=after)
        uncollected = uncollected_dead_tasks(before=cutoff)
        # A dead letter whose work order was cancelled counts from the cancellation.
        orphans = orphaned_dead_letters(before=cutoff).count()
        return Reading(uncollected + orphans, {"uncollected": uncollected, "orphans": orphans, "after": after})

    def describe(self, facts):
        return gettext("%(uncollected)d dead tasks not made dead letters and %(orphans)d open dead letters "
                       "without a live work order, %(after)s or more after they died") % {
                           **facts, "after": seconds_words(facts["after"])}

    def rows_url(self) -> str:
        return reverse("admin:compensation_deadletter_changelist") + f"?state__exact={DeadLetterState.OPEN}"


class NotificationFailed(AnyRule):
    """Notifications that failed (the receiver refused them, or never answered through every
    attempt) within RETRYOPS_ALERT_NOTIFICATION_WINDOW_SECONDS: a page that never arrived. Its
    own pages aside: through a broken channel its resolve fails too, and would fire it again,
    opening an incident every window for as long as the channel stays broken."""

    name = "notification_failed"
    title = "Failed notifications"
    label = _("Failed notifications")

    def read(self, *, now: datetime) -> Reading:
        window = settings.RETRYOPS_ALERT_NOTIFICATION_WINDOW_SECONDS
        # notification_failed_idx: the failed rows only, which stay few.
        failed = dict(Notification.objects.filter(state=NotificationState.FAILED,
                                                  last_attempt_at__gte=now - timedelta(seconds=window))
                      .exclude(dedup_key=dedup_key(self.name)).order_by().values_list("channel").annotate(n=Count("*")))
        return Reading(sum(failed.values()), {"by_channel": dict(sorted(failed.items())), "window": window})

    def describe(self, facts):
        total = sum(facts["by_channel"].values())
        said = ngettext("%(count)d notification failed in the last %(window)s",
                        "%(count)d notifications failed in the last %(window)s", total) % {
                            "count": total, "window": seconds_words(facts["window"])}
        if not total:
            return said
        channels = ", ".join(gettext("%(count)d to %(channel)s") % {"count": n, "channel": channel}
                             for channel, n in facts["by_channel"].items())
        return gettext("%(said)s (%(channels)s)") % {"said": said, "channels": channels}

    def rows_url(self) -> str:
        return reverse("admin:compensation_notification_changelist") + f"?state__exact={NotificationState.FAILED}"


class ComponentSilent(AnyRule):
    """Workers and the RQ scheduler not seen for a minute, or no ops process leading: nothing runs
    the flows, the retries or the periodic steps. This alert is evaluated by the ops process, so it
    cannot say that no ops process runs: Prometheus' RetryOpsAlertsNotEvaluated says that to the
    on-call. The heartbeats (telemetry.health.heartbeats) decide who is silent."""

    name = "component_silent"
    title = "Workers or scheduler silent"
    label = _("Workers or scheduler silent")
    severity = "critical"

    def read(self, *, now: datetime) -> Reading:
        silent = sorted(str(name)[:MAX_NAME_LENGTH] for name in heartbeats.silent_components(now=now))
        return Reading(len(silent), {"silent": silent[:NAMES_KEPT], "count": len(silent)})

    def describe(self, facts):
        if not facts["silent"]:
            return gettext("every worker and the scheduler seen")
        names = ", ".join(facts["silent"])
        if facts["count"] > len(facts["silent"]):
            names = gettext("%(names)s and %(count)d more") % {"names": names,
                                                              "count": facts["count"] - len(facts["silent"])}
        return gettext("not seen for a minute: %(names)s") % {"names": names}

    def rows_url(self) -> str:
        return reverse("django_rq:home")


class MetricsWatermarkStuck(Rule):
    """The oldest row the metrics rollup has not taken in yet (telemetry.metrics.watermark), waiting
    longer than RETRYOPS_ALERT_METRICS_WATERMARK_SECONDS: a transaction left open anywhere on the
    server holds the watermark back, so every scrape counts more rows live (and vacuum keeps dead
    rows). It names the oldest transaction, never its query. An idle system, with nothing waiting,
    reads 0 whatever holds the watermark; before the first pass it cannot judge."""

    name = "metrics_watermark_stuck"
    title = "Metrics watermark stuck"
    label = _("Metrics watermark stuck")
    unit = "seconds"
    severity = "warning"

    def threshold(self) -> float:
        return settings.RETRYOPS_ALERT_METRICS_WATERMARK_SECONDS

    def read(self, *, now: datetime) -> Reading:
        lag = watermark_lag()
        if lag is None:
            return Reading(None, {"waiting": 0, "age": 0, "holder": None})
        holder = None
        if lag.held:
            seconds = lag.holder_seconds(now)
            holder = {"name": (lag.holder or "")[:MAX_NAME_LENGTH], "pid": lag.holder_pid,
                      "database": (lag.holder_database or "")[:MAX_NAME_LENGTH],
                      "age": None if seconds is None else int(seconds)}
        age = lag.waiting_seconds(now)
        return Reading(age, {"waiting": lag.rows_waiting, "age": int(age), "holder": holder})

    def describe(self, facts):
        said = ngettext("%(waiting)d row waits for the metrics rollup, the oldest for %(age)s",
                        "%(waiting)d rows wait for the metrics rollup, the oldest for %(age)s", facts["waiting"]) % {
                            **facts, "age": age_words(facts["age"])}
        holder = facts["holder"]
        if holder is None:
            return gettext("%(said)s; no transaction on the server holds it back") % {"said": said}
        who = {"said": said, "pid": holder["pid"] or "-", "name": holder["name"] or gettext("no application_name"),
               "database": holder["database"] or "-"}
        if holder["age"] is None:
            return gettext("%(said)s; the oldest transaction on the server, age unknown (the app's database role "
                           "needs pg_read_all_stats to see it): %(name)s (pid %(pid)s, database %(database)s)") % who
        return gettext("%(said)s; the oldest transaction on the server, open for %(age)s: %(name)s (pid %(pid)s, "
                       "database %(database)s)") % {**who, "age": age_words(holder["age"])}

    def rows_url(self) -> str:
        return reverse("admin:telemetry_alert_changelist")  # this alert's detail names the transaction


class RetriesOverdue(AnyRule):
    """Waiting tasks due more than five minutes ago: the flow workers are too few for the load,
    stuck on long attempts, or missing."""

    name = "retries_overdue"
    title = "Retries overdue"
    label = _("Retries overdue")
    severity = "warning"
    after = timedelta(minutes=5)

    def read(self, *, now: datetime) -> Reading:
        overdue = overdue_retries(due_before=now - self.after)
        return Reading(overdue, {"overdue": overdue, "after": int(self.after.total_seconds())})

    def describe(self, facts):
        return ngettext("%(overdue)d waiting task due more than %(after)s ago",
                        "%(overdue)d waiting tasks due more than %(after)s ago", facts["overdue"]) % {
                            **facts, "after": seconds_words(facts["after"])}

    def rows_url(self) -> str:
        return reverse("admin:scheduling_task_changelist") + f"?state__exact={TaskState.RETRYING}"


class MetricsRollupStale(Rule):
    """The metrics rollup's last pass longer ago than two minutes: the gauges it counts (waiting
    tasks, running attempts, dead-letter queue, resources) stay frozen. Before its first pass it
    cannot judge."""

    name = "metrics_rollup_stale"
    title = "Metrics rollup stale"
    label = _("Metrics rollup stale")
    unit = "seconds"
    severity = "warning"

    def threshold(self) -> float:
        return 120

    def read(self, *, now: datetime) -> Reading:
        age = rollup_age(now)
        return Reading(age, {"age": None if age is None else int(age)})

    def describe(self, facts):
        if facts["age"] is None:
            return gettext("the metrics rollup has not run yet")
        return gettext("the metrics rollup last ran %(age)s ago") % {"age": age_words(facts["age"])}

    def rows_url(self) -> str:
        return reverse("django_rq:home")


class FiguresBelowTarget(AnyRule):
    """Acceptance figures of the last window missing their targets: automatic retry success, manual
    compensation completion, and the slowest 1% of dead letters to their work order. A warning, not
    a page: they move slowly over a day's window."""

    name = "figures_below_target"
    title = "Acceptance figures below target"
    label = _("Acceptance figures below target")
    severity = "warning"

    def read(self, *, now: datetime) -> Reading:
        snapshot = latest_snapshot()
        if snapshot is None:
            return Reading(None, {"missed": []})
        watched = (Figure("retry_success_ratio", None, RETRY_SUCCESS_TARGET, "at_least"),
                   Figure("compensation_completion_ratio", None, COMPLETION_TARGET, "at_least"),
                   Figure("dead_letter_to_work_order_p99", None, settings.RETRYOPS_SLA_NOTICE_SECONDS, "at_most"))
        figures = [replace(figure, value=snapshot.figures.get(figure.key)) for figure in watched]
        missed = [{"figure": f.key, "value": f.value, "target": f.target} for f in figures if f.met is False]
        return Reading(len(missed), {"missed": missed})

    def describe(self, facts):
        if not facts["missed"]:
            return gettext("every watched acceptance figure meets its target, or has no data")
        return gettext("below target: %(figures)s") % {"figures": ", ".join(
            gettext("%(figure)s %(value)g (target %(target)g)") % missed for missed in facts["missed"])}

    def rows_url(self) -> str:
        return reverse("admin:index")  # the ops dashboard shows the figures beside their targets


class WorkOrderSLABreached(AnyRule):
    """Live work orders past one of their SLA clocks (notice, acknowledge, compensate), for as long
    as they are. Escalation re-pages each breach once through the channels; this is what a site
    paged by Alertmanager alone hears, and what says a breach escalation failed to page."""

    name = "work_order_sla_breached"
    title = "Work order SLA breached"
    label = _("Work order SLA breached")
    severity = "warning"

    def read(self, *, now: datetime) -> Reading:
        board = live_work_order_board(now=now, limit=0)
        return Reading(board["past_sla"], {"past": board["past_sla"], **board["past_by_clock"]})

    def describe(self, facts):
        return ngettext("%(past)d live work order past its SLA (notice %(notice)d, acknowledge %(acknowledge)d, "
                        "compensate %(compensate)d)",
                        "%(past)d live work orders past their SLA (notice %(notice)d, acknowledge %(acknowledge)d, "
                        "compensate %(compensate)d)", facts["past"]) % facts

    def rows_url(self) -> str:
        return reverse("admin:compensation_workorder_changelist")


# Every rule, by name, in the order the admin lists them.
RULES: dict[str, Rule] = {rule.name: rule for rule in (RetryFailureRate(), DeadLetterQueueLength(),
                                                       WorkOrderCreationFailed(), NotificationFailed(),
                                                       ComponentSilent(), MetricsWatermarkStuck(), RetriesOverdue(),
                                                       MetricsRollupStale(), FiguresBelowTarget(),
                                                       WorkOrderSLABreached())}
