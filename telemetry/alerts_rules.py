"""Alert rules: one small class per condition the on-call is paged about, in a registry (RULES).

Each rule reads one number (`read`): a count or a ratio, from the database or from the health
checks' heartbeats, with a line of English saying what it saw (stored on the alert and sent in the
notification). Its threshold comes from the settings; telemetry.alerts decides when it fires and
when it resolves. A rule that cannot judge (too few retries, no heartbeats yet) reads no value.
"""

import importlib
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import ClassVar

from django.conf import settings
from django.db.models import Count, Q
from django.urls import reverse
from django.utils.functional import Promise
from django.utils.translation import gettext_lazy as _

from compensation.choices import DeadLetterState
from compensation.models import DeadLetter
from compensation.notifications_models import Notification, NotificationState
from compensation.services.dead_letters import CONSUMER as DEAD_LETTER_CONSUMER
from compensation.services.escalation import orphaned_dead_letters
from scheduling.choices import TaskEventKind
from scheduling.selectors import retry_outcomes, undelivered_task_events

# The health checks' module (telemetry/heartbeats.py): `silent_components(*, now) -> list[str]`.
HEARTBEATS_MODULE = "telemetry.heartbeats"


@dataclass(frozen=True)
class Reading:
    """What one evaluation of a rule saw: its value (None: nothing to judge) and, in English, why."""

    value: float | None
    detail: str


def seconds_words(seconds: int) -> str:
    """600 -> "10 min", 90 -> "90 s", 7200 -> "2 h": a window as the messages say it."""
    if seconds % 3600 == 0:
        return f"{seconds // 3600} h"
    if seconds % 60 == 0:
        return f"{seconds // 60} min"
    return f"{seconds} s"


class Rule:
    """Base of the registry's classes: a name (the dedup key's last part and the metric's label),
    a title in English (notifications) and in the reader's language (the admin), a unit, and
    where in the console the rows behind it are."""

    name: ClassVar[str]
    title: ClassVar[str]
    label: ClassVar[Promise]
    unit: ClassVar[str] = "count"  # or "ratio": shown as a percentage
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

    def rows_url(self) -> str:
        """The console's list of what the alert is about."""
        raise NotImplementedError

    def shown(self, value: float | None) -> str:
        """A value as the messages write it: 23.3% for a ratio, 12 for a count."""
        if value is None:
            return "n/a"
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
        needed = settings.RETRYOPS_ALERT_FAILURE_MIN_RETRIES
        if ended < needed:
            return Reading(None, f"{ended} retries ended in the last {seconds_words(window)}, "
                                 f"fewer than the {needed} needed to judge")
        return Reading(failed / ended, f"{failed} of {ended} retries failed in the last {seconds_words(window)} "
                                       f"({outcomes['dead']} of them dead)")

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
        return Reading(count, f"{count} open dead letters")

    def rows_url(self) -> str:
        return reverse("admin:compensation_deadletter_changelist") + f"?state__exact={DeadLetterState.OPEN}"


class WorkOrderCreationFailed(AnyRule):
    """Dead letters nobody was given to act on, RETRYOPS_ALERT_WORK_ORDER_AFTER_SECONDS after their
    task died: dead tasks whose task.dead event the dead-letter consumer has not processed (it makes
    the dead letter and its work order in one transaction, so a failure leaves the event), and open
    dead letters without a live work order (escalation gives them one). Either is the consumer and
    escalation failing, and the operators' 5-minute notice running out."""

    name = "work_order_creation_failed"
    title = "Work order creation failed"
    label = _("Work order creation failed")
    severity = "critical"

    def read(self, *, now: datetime) -> Reading:
        after = settings.RETRYOPS_ALERT_WORK_ORDER_AFTER_SECONDS
        cutoff = now - timedelta(seconds=after)
        uncollected = undelivered_task_events(consumer=DEAD_LETTER_CONSUMER, kind=TaskEventKind.DEAD, before=cutoff)
        # A dead letter whose work order was cancelled counts from the cancellation.
        orphans = orphaned_dead_letters().filter(died_at__lt=cutoff).filter(
            Q(work_order__isnull=True) | Q(work_order__ended_at__lt=cutoff)).count()
        return Reading(uncollected + orphans,
                       f"{uncollected} dead tasks not made dead letters and {orphans} open dead letters "
                       f"without a live work order, {seconds_words(after)} or more after they died")

    def rows_url(self) -> str:
        return reverse("admin:compensation_deadletter_changelist") + f"?state__exact={DeadLetterState.OPEN}"


class NotificationFailed(AnyRule):
    """Notifications that failed (the receiver refused them, or never answered through every
    attempt) within RETRYOPS_ALERT_NOTIFICATION_WINDOW_SECONDS: a page that never arrived."""

    name = "notification_failed"
    title = "Failed notifications"
    label = _("Failed notifications")

    def read(self, *, now: datetime) -> Reading:
        window = settings.RETRYOPS_ALERT_NOTIFICATION_WINDOW_SECONDS
        # notification_failed_idx: the failed rows only, which stay few.
        failed = dict(Notification.objects.filter(state=NotificationState.FAILED,
                                                  last_attempt_at__gte=now - timedelta(seconds=window))
                      .order_by().values_list("channel").annotate(n=Count("*")))
        total = sum(failed.values())
        by_channel = ", ".join(f"{n} to {channel}" for channel, n in sorted(failed.items()))
        return Reading(total, f"{total} notifications failed in the last {seconds_words(window)}"
                              + (f" ({by_channel})" if by_channel else ""))

    def rows_url(self) -> str:
        return reverse("admin:compensation_notification_changelist") + f"?state__exact={NotificationState.FAILED}"


class ComponentSilent(AnyRule):
    """Workers and the RQ scheduler not seen for a minute: nothing runs the flows, the retries or
    the periodic jobs (this alert included, when the periodic worker is the silent one: the
    health checks' /readyz says it to the load balancer too). The health checks' heartbeats
    decide who is silent; without that module the rule cannot judge."""

    name = "component_silent"
    title = "Workers or scheduler silent"
    label = _("Workers or scheduler silent")
    severity = "critical"

    def read(self, *, now: datetime) -> Reading:
        try:
            heartbeats = importlib.import_module(HEARTBEATS_MODULE)
        except ModuleNotFoundError as exc:
            if exc.name != HEARTBEATS_MODULE:
                raise
            return Reading(None, f"{HEARTBEATS_MODULE} is not installed: no heartbeats to judge")
        silent = sorted(heartbeats.silent_components(now=now))
        if not silent:
            return Reading(0, "every worker and the scheduler seen")
        return Reading(len(silent), f"not seen for a minute: {', '.join(silent)}")

    def rows_url(self) -> str:
        return reverse("django_rq:home")


# Every rule, by name, in the order the admin lists them.
RULES: dict[str, Rule] = {rule.name: rule for rule in (RetryFailureRate(), DeadLetterQueueLength(),
                                                       WorkOrderCreationFailed(), NotificationFailed(),
                                                       ComponentSilent())}
