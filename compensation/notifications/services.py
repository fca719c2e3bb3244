"""Notifications: queue a message to every channel in the caller's transaction, send the due ones
after commit, retry what a retry can help, and keep the rest visible as failed or skipped.

Each message is a Notification row (an outbox). The sender claims due rows one at a time with
FOR UPDATE SKIP LOCKED and holds that lock while it sends: two senders never send one row, and a
sender that dies mid-send rolls back, which leaves the row due for the next one. A message of an
incident (a dedup key on a channel) waits while an earlier one of the same incident is queued, so
a resolve never overtakes its trigger.
"""

import logging
from collections import Counter
from collections.abc import Iterable
from datetime import timedelta
from typing import Any

import django_rq
from django.conf import settings
from django.db import transaction
from django.db.models import Exists, OuterRef, QuerySet, Subquery
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import ngettext
from redis.exceptions import RedisError

from audit.choices import AuditAction
from audit.services import Target, record_audit
from compensation.choices import state_words
from compensation.notifications.models import (
    MAX_DEDUP_KEY_LENGTH,
    Notification,
    NotificationEvent,
    NotificationState,
    NotificationSubject,
)
from compensation.notifications.notifiers import (
    NOTIFIERS,
    PAGERDUTY_SEVERITIES,
    Message,
    TransportError,
    notifier_for,
)
from retryops.errors import BadInput, IllegalTransition, NotFound
from retryops.jsonsafe import (
    MAX_SAFE_INTEGER,
    UnstorableValue,
    check_text,
    clean_text,
    refuse_unstorable,
)

log = logging.getLogger(__name__)

# However often a send failed, or however long a receiver asks us to wait, the next try is at
# most this far away.
MAX_RETRY_DELAY = timedelta(hours=1)
MAX_SUMMARY_LENGTH = 10_000
MAX_LINK_LENGTH = 2_000
# States an operator may send again: failed (the receiver refused or never answered) and skipped
# (the channel was not configured then).
RESENDABLE = (NotificationState.FAILED, NotificationState.SKIPPED)


def _text(value: Any, *, field: str, max_length: int, required: bool = True) -> str:
    if not isinstance(value, str) or (required and not value.strip()):
        raise BadInput(f"{field} must be {'non-empty ' if required else ''}text, got {value!r}", field=field)
    problem = check_text(value)
    if problem:
        raise BadInput(f"{field} {problem}", field=field)
    if len(value) > max_length:
        raise BadInput(f"{field} is {len(value)} characters long; at most {max_length} fit", field=field)
    return value.strip()


def _link(value: Any) -> str:
    """An absolute http(s) URL; a path (/admin/...) is made absolute with RETRYOPS_PUBLIC_URL."""
    link = _text(value, field="link", max_length=MAX_LINK_LENGTH, required=False)
    if link.startswith("/"):
        return settings.RETRYOPS_PUBLIC_URL + link
    if link and not link.startswith(("http://", "https://")):
        raise BadInput(f"link must be an http(s) URL or a path starting with /, got {link!r}", field="link")
    return link


# A subject's name when the caller gives no label: "work order 7", "alert 3".
SUBJECT_NOUNS = {NotificationSubject.WORK_ORDER: "work order", NotificationSubject.ALERT: "alert"}


def _message(*, event, dedup_key, subject_type, subject_id, subject_label, summary, details, link,
             severity) -> Message:
    if event not in NotificationEvent.values:
        raise BadInput(f"event must be one of {', '.join(NotificationEvent.values)}, got {event!r}", field="event")
    if subject_type not in NotificationSubject.values:
        raise BadInput(f"subject_type must be one of {', '.join(NotificationSubject.values)}, got {subject_type!r}",
                       field="subject_type")
    if isinstance(subject_id, bool) or not isinstance(subject_id, int) or not 0 < subject_id <= MAX_SAFE_INTEGER:
        raise BadInput(f"subject_id must be the id of a {SUBJECT_NOUNS[subject_type]} (a positive integer), "
                       f"got {subject_id!r}", field="subject_id")
    if severity not in PAGERDUTY_SEVERITIES:
        raise BadInput(f"severity must be one of {', '.join(PAGERDUTY_SEVERITIES)}, got {severity!r}",
                       field="severity")
    if not isinstance(details, dict):
        raise BadInput(f"details must be a JSON object, got {type(details).__name__}", field="details")
    try:
        refuse_unstorable(details, name="details")
    except UnstorableValue as exc:
        raise BadInput(str(exc), field="details", path=exc.path) from None
    return Message(
        event=event,
        dedup_key=_text(dedup_key, field="dedup_key", max_length=MAX_DEDUP_KEY_LENGTH),
        subject_type=subject_type,
        subject_id=subject_id,
        subject_label=_text(subject_label, field="subject_label", max_length=200, required=False)
        or f"{SUBJECT_NOUNS[subject_type]} {subject_id}",
        summary=_text(summary, field="summary", max_length=MAX_SUMMARY_LENGTH),
        details=details,
        link=_link(link),
        severity=severity,
    )


def work_order_dedup_key(work_order_id: int) -> str:
    """The one dedup key of a work order's incident: its trigger and its resolve share it."""
    return f"retryops/work_order/{work_order_id}"


def queue_notification(*, event: str, dedup_key: str, subject_id: int, summary: str, details: dict,
                       link: str, subject_label: str = "", severity: str = "error",
                       subject_type: str = NotificationSubject.WORK_ORDER) -> list[Notification]:
    """Queue `event` about a subject (a work order unless `subject_type` says an alert) to every
    channel, in the caller's transaction; the rows are sent once it commits. A channel without its
    URL or key gets a `skipped` row that says which setting is missing. `link` is an http(s) URL
    or a path under RETRYOPS_PUBLIC_URL."""
    message = _message(event=event, dedup_key=dedup_key, subject_type=subject_type, subject_id=subject_id,
                       subject_label=subject_label, summary=summary, details=details, link=link,
                       severity=severity)
    now = timezone.now()
    rows = []
    for channel, notifier_class in NOTIFIERS.items():
        notifier = notifier_class()
        reason = notifier.not_configured()
        rows.append(Notification(
            channel=channel, event=message.event, dedup_key=message.dedup_key,
            subject_type=message.subject_type, subject_id=message.subject_id, subject_label=message.subject_label,
            payload=notifier.build(message),
            state=NotificationState.SKIPPED if reason else NotificationState.QUEUED,
            next_attempt_at=None if reason else now, last_error=reason or ""))
    with transaction.atomic():
        created = Notification.objects.bulk_create(rows)
        if any(row.state == NotificationState.QUEUED for row in created):
            send_after_commit()
    for row in created:
        if row.state == NotificationState.SKIPPED:
            log.info("notification %s (%s %s) skipped: %s", row.pk, row.channel, row.dedup_key, row.last_error)
    return created


def send_after_commit() -> None:
    """Put the send job on the flow workers' default queue once the caller's transaction commits."""
    transaction.on_commit(_enqueue_send, robust=True)


def _enqueue_send() -> None:
    # Imported here: the jobs module imports this one.
    from compensation.notifications.jobs import send_notifications_job

    try:
        django_rq.get_queue("default").enqueue(send_notifications_job, result_ttl=0)
    except RedisError as exc:
        # The rows are safe in the database; the periodic send job picks them up.
        log.warning("notification send job not enqueued (%s); the ops process will send", exc)


def retry_delay(attempts: int, retry_after: float | None = None) -> timedelta:
    """How long after its `attempts`-th failed send a notification is tried again: the base
    delay doubled per attempt, or longer if the receiver asked (Retry-After), at most an hour."""
    delay = timedelta(seconds=settings.RETRYOPS_NOTIFY_RETRY_DELAY) * 2 ** min(attempts - 1, 20)
    if retry_after is not None:
        # Capped before it becomes a timedelta: a receiver may ask for more seconds than one holds.
        delay = max(delay, timedelta(seconds=min(retry_after, MAX_RETRY_DELAY.total_seconds())))
    return min(delay, MAX_RETRY_DELAY)


def due_notifications(*, now=None) -> QuerySet[Notification]:
    """Queued rows due now whose incident has no earlier row still queued, oldest due first."""
    earlier_queued = Notification.objects.filter(
        state=NotificationState.QUEUED, channel=OuterRef("channel"), dedup_key=OuterRef("dedup_key"),
        id__lt=OuterRef("id"))
    return (Notification.objects.filter(state=NotificationState.QUEUED, next_attempt_at__lte=now or timezone.now())
            .exclude(Exists(earlier_queued)).order_by("next_attempt_at", "id"))


def _record_failure(row: Notification, exc: TransportError, now) -> str:
    row.attempts += 1
    row.last_error = clean_text(str(exc))
    row.last_status_code = exc.status_code
    if exc.retryable and row.attempts < settings.RETRYOPS_NOTIFY_MAX_ATTEMPTS:
        row.next_attempt_at = now + retry_delay(row.attempts, exc.retry_after)
        return "retrying"
    if exc.retryable:
        row.last_error = f"gave up after {row.attempts} attempts: {row.last_error}"
    row.state, row.next_attempt_at = NotificationState.FAILED, None
    log.warning("notification %s (%s %s %s) failed: %s", row.pk, row.channel, row.event, row.dedup_key,
                row.last_error)
    return NotificationState.FAILED


def _send_next(*, skip_channels: set[str]) -> tuple[Notification, str, bool] | None:
    """Claim the next due row and send it, inside one transaction that holds its lock; return
    the row, what became of it, and whether its receiver looked unreachable."""
    with transaction.atomic():
        row = (due_notifications().exclude(channel__in=skip_channels)
               .select_for_update(skip_locked=True).first())
        if row is None:
            return None
        notifier = notifier_for(row.channel)
        now = timezone.now()
        row.last_attempt_at = now
        reason = notifier.not_configured()
        unreachable = False
        if reason:
            row.state, row.next_attempt_at, row.last_error = NotificationState.SKIPPED, None, reason
            outcome = NotificationState.SKIPPED
        else:
            try:
                status = notifier.send(row.payload)
            except TransportError as exc:
                outcome = _record_failure(row, exc, now)
                unreachable = exc.retryable
            except Exception as exc:
                # A bug or a surprise in a notifier: retried like an outage and, if it persists,
                # left failed with its message, never lost and never blocking the other rows.
                log.exception("notifier %s raised on notification %s", row.channel, row.pk)
                outcome = _record_failure(row, TransportError(f"{type(exc).__name__}: {exc}", retryable=True), now)
                unreachable = True
            else:
                row.attempts += 1
                row.state, row.next_attempt_at, row.sent_at = NotificationState.SENT, None, now
                row.last_status_code, row.last_error = status, ""
                outcome = NotificationState.SENT
        row.save(update_fields=["state", "attempts", "next_attempt_at", "last_attempt_at", "last_error",
                                "last_status_code", "sent_at"])
    return row, outcome, unreachable


def send_due_notifications(*, limit: int = 200) -> dict[str, int]:
    """Send up to `limit` due notifications, one transaction each; return how many were sent,
    are retrying, failed and were skipped. After a retryable failure the rest of that channel
    waits for the next run, so one receiver that is down costs one timeout per run, not one per row."""
    counts: Counter[str] = Counter()
    unreachable: set[str] = set()
    for _turn in range(limit):
        result = _send_next(skip_channels=unreachable)
        if result is None:
            break
        row, outcome, down = result
        counts[outcome] += 1
        if down:
            unreachable.add(row.channel)
    return {key: counts[key] for key in ("sent", "retrying", "failed", "skipped")}


def _ids(ids: Any) -> list[int]:
    if isinstance(ids, (str, bytes)) or not isinstance(ids, Iterable):
        raise BadInput(_("ids must be a list of notification ids, got %(value)r") % {"value": ids}, field="ids")
    ids = list(ids)
    if not ids:
        raise BadInput(_("ids is empty: choose at least one notification"), field="ids")
    bad = [i for i in ids if isinstance(i, bool) or not isinstance(i, int) or not 0 < i <= MAX_SAFE_INTEGER]
    if bad:
        raise BadInput(_("ids must be notification ids (positive integers), got %(value)r") % {"value": bad[:5]},
                       field="ids")
    return sorted(set(ids))


def _target_of(rows: list[Notification]) -> Target:
    ids = ",".join(str(row.pk) for row in rows)
    if len(ids) > 100:
        ids = f"{rows[0].pk}..{rows[-1].pk} ({len(rows)})"
    label = str(rows[0]) if len(rows) == 1 else f"{len(rows)} notifications"
    return Target(type=Notification._meta.label_lower, id=ids, label=label)


def resend_notifications(*, ids: Iterable[int], actor: str) -> list[Notification]:
    """Queue failed or skipped notifications again, with a fresh round of attempts, and send
    them after commit. All or none: an unknown id, a row in another state, a trigger whose
    incident was resolved since or a channel that is still not configured refuses the whole
    request. One audit entry for the action."""
    wanted = _ids(ids)
    actor = _text(actor, field="actor", max_length=200)
    # A trigger whose incident was resolved since would open an incident that nobody resolves
    # (escalation's resendable_notifications leaves such triggers alone for the same reason).
    resolved_by = Notification.objects.filter(
        channel=OuterRef("channel"), dedup_key=OuterRef("dedup_key"), id__gt=OuterRef("id"),
        event=NotificationEvent.RESOLVE, state=NotificationState.SENT).order_by("id").values("id")[:1]
    with transaction.atomic():
        rows = list(Notification.objects.select_for_update().filter(pk__in=wanted)
                    .annotate(resolved_by=Subquery(resolved_by)).order_by("id"))
        missing = sorted(set(wanted) - {row.pk for row in rows})
        if missing:
            raise NotFound(ngettext("no notification with id %(ids)s", "no notification with ids %(ids)s",
                                    len(missing)) % {"ids": ", ".join(map(str, missing[:10]))},
                           code="notification_not_found", ids=missing)
        wrong = {row.pk: row.state for row in rows if row.state not in RESENDABLE}
        if wrong:
            listed = ", ".join(_("%(id)s is %(state)s") % {"id": pk, "state": state_words(NotificationState, state)}
                               for pk, state in list(wrong.items())[:10])
            raise IllegalTransition(_("only failed or skipped notifications can be sent again: %(listed)s") % {
                                    "listed": listed},
                                    notifications=wrong, action="resend")
        stale = {row.pk: row for row in rows if row.event == NotificationEvent.TRIGGER and row.resolved_by}
        if stale:
            listed = ", ".join(_("%(id)s (resolved since by notification %(by)s)") % {"id": pk, "by": row.resolved_by}
                               for pk, row in list(stale.items())[:10])
            raise IllegalTransition(_("a trigger whose incident was resolved since is not sent again: %(listed)s") % {
                                    "listed": listed},
                                    notifications={pk: row.state for pk, row in stale.items()}, action="resend")
        unconfigured = {row.pk: reason for row in rows if (reason := notifier_for(row.channel).not_configured())}
        if unconfigured:
            pk, reason = next(iter(unconfigured.items()))
            raise BadInput(_("notification %(id)s cannot be sent: %(reason)s") % {"id": pk, "reason": reason},
                           field="ids", notifications=unconfigured)
        before = {str(row.pk): {"state": row.state, "attempts": row.attempts, "last_error": row.last_error}
                  for row in rows}
        Notification.objects.filter(pk__in=wanted).update(
            state=NotificationState.QUEUED, attempts=0, next_attempt_at=timezone.now())
        record_audit(action=AuditAction.NOTIFICATION_RESEND, target=_target_of(rows), before=before,
                     after={"state": NotificationState.QUEUED, "ids": wanted}, actor=actor,
                     reason=f"send {len(rows)} notification{'s' if len(rows) != 1 else ''} again")
        send_after_commit()
    return list(Notification.objects.filter(pk__in=wanted).order_by("id"))
