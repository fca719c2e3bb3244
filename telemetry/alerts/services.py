"""Alerts: evaluate each rule of telemetry.alerts.rules, fire it once when its value goes above its
threshold, resolve it when the value has come back down, and tell the on-call both ways.

Hysteresis: an alert that is ok fires at the first evaluation whose value is above its threshold.
A firing alert stays firing while its value is above its clear level (threshold x
RETRYOPS_ALERT_CLEAR_RATIO), and resolves once its value has stayed at or below the clear level
(or could not be judged) for RETRYOPS_ALERT_CLEAR_SECONDS: a value that wanders inside the band
between the two levels changes nothing, and one bad evaluation neither fires nor resolves twice.

Each firing and each resolution is an AlertEvent row and a notification on every channel (the
compensation app's outbox) with the dedup key retryops/alert/<rule>: PagerDuty's trigger opens an
incident, its resolve with the same key closes it; Slack gets a message each way. Two evaluators
never fire an alert twice: each evaluates a rule holding its Alert row's lock (FOR UPDATE SKIP
LOCKED: the second one skips the rule), and reads the rule's value under that lock.
"""

import logging
import math
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.urls import reverse
from django.utils import timezone, translation

from compensation.notifications.models import NotificationEvent, NotificationSubject
from compensation.notifications.services import queue_notification
from retryops.errors import BadInput
from retryops.jsonsafe import clean_text, make_storable
from telemetry.alerts.models import (
    MAX_DETAIL_LENGTH,
    MAX_VALUE,
    Alert,
    AlertEvent,
    AlertEventKind,
    AlertState,
)
from telemetry.alerts.rules import RULES, Reading, Rule, dedup_key

log = logging.getLogger(__name__)

# What one evaluation of one rule did.
FIRED, RESOLVED = "fired", "resolved"  # a transition, notified
FIRING, OK = "firing", "ok"  # no change
CLEARING = "clearing"  # firing, at or below its clear level, not for long enough yet
BUSY = "busy"  # another evaluator holds the alert
FAILED = "failed"  # the rule raised; logged, the other rules still ran


def _rule(name) -> Rule:
    if not isinstance(name, str) or name not in RULES:
        raise BadInput(f"rule must be one of {', '.join(RULES)}, got {name!r}", field="rule")
    return RULES[name]


def _now(now) -> datetime:
    if now is None:
        return timezone.now()
    if not isinstance(now, datetime) or timezone.is_naive(now):
        raise BadInput(f"now must be an aware datetime, got {now!r}", field="now")
    return now


@dataclass(frozen=True)
class Seen:
    """A rule's reading as the alert row holds it: its value, its facts, and what they say in English."""

    value: float | None
    facts: dict
    detail: str


def _checked(rule: Rule, reading: Reading) -> Seen:
    """A reading as the alert row can hold it: a finite value in range (a rule that reads NaN is a
    bug, refused before anything is written), storable facts, and their sentence in English (what
    is stored and sent), cut to the column's length."""
    value = reading.value
    if value is not None:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                or not 0 <= value <= MAX_VALUE:
            raise BadInput(f"rule {rule.name} read {value!r}: a value must be a number from 0 to {MAX_VALUE:g}",
                           field="value", rule=rule.name)
        value = float(value)
    facts, _notes = make_storable(reading.facts)
    if not isinstance(facts, dict):
        raise BadInput(f"rule {rule.name} read facts that are not a JSON object: {reading.facts!r}", field="facts",
                       rule=rule.name)
    with translation.override(None):
        detail = clean_text(rule.describe(facts))
    if len(detail) > MAX_DETAIL_LENGTH:
        detail = detail[: MAX_DETAIL_LENGTH - 1] + "…"
    return Seen(value, facts, detail)


def ensure_alerts() -> None:
    """An Alert row for every rule (ok, as a new rule starts); those that exist are left alone."""
    Alert.objects.bulk_create(
        [Alert(rule=name, threshold=rule.threshold(), clear_level=rule.clear_level()) for name, rule in RULES.items()],
        ignore_conflicts=True)


def _notify(alert: Alert, rule: Rule, event: str, reading: Seen) -> None:
    threshold = rule.threshold()
    if event == NotificationEvent.TRIGGER:
        summary = f"{rule.title} {rule.shown(reading.value)} is above {rule.shown(threshold)}: {reading.detail}"
    else:
        summary = (f"Resolved: {rule.title} {rule.shown(reading.value)}, at or below "
                   f"{rule.shown(rule.clear_level())}: {reading.detail}")
    queue_notification(
        event=event, dedup_key=dedup_key(rule.name), subject_type=NotificationSubject.ALERT, subject_id=alert.pk,
        subject_label=f"alert {rule.name}", summary=summary, severity=rule.severity,
        details={"rule": rule.name, "value": rule.shown(reading.value), "threshold": rule.shown(threshold),
                 "clear_level": rule.shown(rule.clear_level()), "detail": reading.detail,
                 "rows": settings.RETRYOPS_PUBLIC_URL + rule.rows_url()},
        link=reverse("admin:telemetry_alert_change", args=[alert.pk]))


def _transition(alert: Alert, rule: Rule, reading: Seen, now: datetime) -> str:
    """What this reading does to the alert (the hysteresis of the module's docstring)."""
    above = reading.value is not None and reading.value > rule.threshold()
    clear = reading.value is None or reading.value <= rule.clear_level()
    if alert.state == AlertState.OK:
        return FIRED if above else OK
    if not clear:
        return FIRING
    clear_since = alert.clear_since or now
    if now - clear_since >= timedelta(seconds=settings.RETRYOPS_ALERT_CLEAR_SECONDS):
        return RESOLVED
    return CLEARING


def evaluate_alert(*, rule: str, now: datetime | None = None) -> str:
    """Evaluate one rule at `now` (default: the current time) and apply what it reads, in one
    transaction that holds the alert's lock: fired and resolved write an AlertEvent and queue the
    notifications (sent once it commits). Returns what happened (FIRED, RESOLVED, FIRING, OK,
    CLEARING, or BUSY when another evaluator holds the alert)."""
    rule = _rule(rule)
    now = _now(now)
    with transaction.atomic():
        alert = Alert.objects.select_for_update(skip_locked=True).filter(rule=rule.name).first()
        if alert is None:
            if Alert.objects.filter(rule=rule.name).exists():
                return BUSY
            ensure_alerts()
            alert = Alert.objects.select_for_update(skip_locked=True).filter(rule=rule.name).first()
            if alert is None:
                return BUSY
        # Read under the lock: a second evaluator that waited for it sees this one's outcome.
        reading = _checked(rule, rule.read(now=now))
        outcome = _transition(alert, rule, reading, now)
        alert.value, alert.facts, alert.detail, alert.evaluated_at = reading.value, reading.facts, reading.detail, now
        alert.threshold, alert.clear_level = rule.threshold(), rule.clear_level()
        if outcome == FIRED:
            alert.state, alert.since, alert.clear_since = AlertState.FIRING, now, None
        elif outcome == RESOLVED:
            alert.state, alert.since, alert.clear_since = AlertState.OK, now, None
        elif outcome == CLEARING:
            alert.clear_since = alert.clear_since or now
        else:
            alert.clear_since = None
        alert.save(update_fields=["state", "since", "clear_since", "value", "facts", "detail", "threshold",
                                  "clear_level", "evaluated_at"])
        if outcome in (FIRED, RESOLVED):
            fired = outcome == FIRED
            AlertEvent.objects.create(alert=alert, kind=AlertEventKind.FIRED if fired else AlertEventKind.RESOLVED,
                                      at=now, value=reading.value, level=alert.threshold if fired else alert.clear_level,
                                      facts=reading.facts, detail=reading.detail)
            _notify(alert, rule, NotificationEvent.TRIGGER if outcome == FIRED else NotificationEvent.RESOLVE,
                    reading)
            log.warning("alert %s %s: %s", rule.name, outcome, reading.detail)
    return outcome


@dataclass
class Evaluation:
    """What one run of evaluate_alerts did, per rule; `failures` says which rules raised and why."""

    outcomes: dict[str, str] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {"outcomes": self.outcomes, "failures": self.failures}


def evaluate_alerts(*, now: datetime | None = None) -> Evaluation:
    """Evaluate every rule at `now`, each in its own transaction: a rule that raises is logged and
    counted, and the others still run."""
    now = _now(now)
    result = Evaluation()
    for name in RULES:
        try:
            result.outcomes[name] = evaluate_alert(rule=name, now=now)
        except Exception as exc:
            log.exception("alert %s: evaluation failed", name)
            result.outcomes[name] = FAILED
            result.failures.append(f"{name}: {type(exc).__name__}: {exc}")
    return result


def read_alerts(*, now: datetime | None = None) -> dict[str, Seen]:
    """What each rule reads now, changing nothing (`manage.py evaluate_alerts --dry-run`)."""
    now = _now(now)
    return {name: _checked(rule, rule.read(now=now)) for name, rule in RULES.items()}
