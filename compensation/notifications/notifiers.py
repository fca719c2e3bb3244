"""Notifiers: one small class per kind of message, as Healthchecks' transports.

Each builds the body of its message when the notification is queued (`build`, stored on the row
without secrets) and sends a stored body later (`send`), raising TransportError with `retryable`
saying whether sending the same body again can help: a timeout, a refused connection, 408, 429
or a 5xx can (PagerDuty's advice for its Events API); a 400, 401, 403 or 404 cannot.
"""

import email.utils
import os
import threading
from dataclasses import dataclass, field
from typing import Any, ClassVar
from urllib.parse import urlsplit

import httpx
from django.conf import settings
from django.utils import timezone

from compensation.notifications.models import NotificationChannel, NotificationEvent

# PagerDuty truncates a longer summary; we cut it ourselves so the stored payload is what arrives.
PAGERDUTY_MAX_SUMMARY = 1024
PAGERDUTY_SEVERITIES = ("critical", "error", "warning", "info")
# Slack's limits for a header block's text, a section field and a section's fields.
SLACK_MAX_HEADER = 150
SLACK_MAX_FIELD = 2000
SLACK_MAX_FIELDS = 10
RETRYABLE_STATUSES = frozenset({408, 429})
USER_AGENT = "RetryOps notifier"


class TransportError(Exception):
    """A send that did not arrive. `retryable`: the same body may arrive later (timeout, 429, 5xx);
    otherwise the receiver refused it for good. `retry_after`: seconds the receiver asked us to wait."""

    def __init__(self, message: str, *, retryable: bool, status_code: int | None = None,
                 retry_after: float | None = None):
        super().__init__(message)
        self.retryable = retryable
        self.status_code = status_code
        self.retry_after = retry_after


@dataclass(frozen=True)
class Message:
    """What a notification says, whatever the channel."""

    event: str
    dedup_key: str
    subject_id: int
    subject_label: str
    summary: str
    details: dict[str, Any] = field(default_factory=dict)
    link: str = ""
    severity: str = "error"
    subject_type: str = "work_order"


_clients: dict[int, httpx.Client] = {}
_clients_lock = threading.Lock()


def http_client() -> httpx.Client:
    """One client per process: it keeps connections alive and builds its TLS context once (a
    client per request spent most of each send on that). Keyed by pid, so a forked RQ work
    horse never shares its parent's sockets."""
    pid = os.getpid()
    client = _clients.get(pid)
    if client is None:
        with _clients_lock:
            client = _clients.get(pid) or _clients.setdefault(pid, httpx.Client(headers={"User-Agent": USER_AGENT}))
    return client


def retry_after_seconds(value: str | None) -> float | None:
    """A Retry-After header as seconds from now: either delta-seconds or an HTTP date."""
    if not value:
        return None
    value = value.strip()
    # isascii: str.isdigit() also takes digits such as "²" that float() refuses.
    if value.isascii() and value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, (when - timezone.now()).total_seconds())


class Notifier:
    """Base of the registry's classes: one channel, one kind of message."""

    channel: ClassVar[str]
    label: ClassVar[str]
    # The setting without which the channel cannot send (its URL or key).
    needs: ClassVar[str]

    def not_configured(self) -> str | None:
        """Why this channel cannot send now (its setting is empty), or None when it can."""
        return None if getattr(settings, self.needs) else f"{self.needs} is not set"

    def build(self, message: Message) -> dict:
        """The body to store on the notification row, without secrets."""
        raise NotImplementedError

    def send(self, payload: dict) -> int:
        """Send a stored body; return the receiver's HTTP status, or raise TransportError."""
        raise NotImplementedError

    def post(self, url: str, body: dict) -> int:
        timeout = settings.RETRYOPS_NOTIFY_TIMEOUT
        try:
            response = http_client().post(url, json=body, timeout=timeout)
        except httpx.TimeoutException:
            raise TransportError(f"{self.label} did not answer within {timeout} s", retryable=True) from None
        except httpx.HTTPError as exc:
            # Connection refused, DNS, TLS: the receiver may be back later. The message names the
            # failure, never the URL (a Slack webhook URL is a secret).
            raise TransportError(f"cannot reach {self.label}: {type(exc).__name__}: {exc}", retryable=True) from None
        if response.is_success:
            return response.status_code
        status = response.status_code
        retryable = status in RETRYABLE_STATUSES or status >= 500
        body = " ".join(response.text.split())[:300]
        raise TransportError(f"{self.label} answered HTTP {status}" + (f": {body}" if body else ""),
                             retryable=retryable, status_code=status,
                             retry_after=retry_after_seconds(response.headers.get("Retry-After")))


def _mrkdwn(text: Any) -> str:
    """Text for Slack mrkdwn: the three characters Slack reads as markup, escaped."""
    return str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


class SlackNotifier(Notifier):
    """A Slack incoming webhook: a header with the summary, the details as fields, a link."""

    channel = NotificationChannel.SLACK
    label = "Slack"
    needs = "RETRYOPS_SLACK_WEBHOOK_URL"

    def build(self, message: Message) -> dict:
        opened = message.event == NotificationEvent.TRIGGER
        title = f"{':rotating_light:' if opened else ':white_check_mark:'} {message.summary}"
        fields = [{"type": "mrkdwn", "text": _cut(f"*{_mrkdwn(name.replace('_', ' ').capitalize())}*\n"
                                                  f"{_mrkdwn(value)}", SLACK_MAX_FIELD)}
                  for name, value in list(message.details.items())[:SLACK_MAX_FIELDS]]
        blocks: list[dict] = [{"type": "header", "text": {"type": "plain_text", "text": _cut(title, SLACK_MAX_HEADER),
                                                         "emoji": True}}]
        if fields:
            blocks.append({"type": "section", "fields": fields})
        if message.link:
            blocks.append({"type": "section", "text": {
                "type": "mrkdwn", "text": f"<{message.link}|Open {_mrkdwn(message.subject_label)} in RetryOps>"}})
        blocks.append({"type": "context", "elements": [
            {"type": "mrkdwn", "text": f"{'Opened' if opened else 'Resolved'} · dedup key `{_mrkdwn(message.dedup_key)}`"}]})
        # `text` is what notifications and clients without blocks show.
        text = message.summary + (f" {message.link}" if message.link else "")
        return {"text": text, "blocks": blocks}

    def send(self, payload: dict) -> int:
        return self.post(settings.RETRYOPS_SLACK_WEBHOOK_URL, payload)


class PagerDutyNotifier(Notifier):
    """PagerDuty Events API v2: `trigger` opens or updates the incident of a dedup key, `resolve` closes it."""

    channel = NotificationChannel.PAGERDUTY
    label = "PagerDuty"
    needs = "RETRYOPS_PAGERDUTY_ROUTING_KEY"

    def build(self, message: Message) -> dict:
        if message.event == NotificationEvent.RESOLVE:
            return {"event_action": "resolve", "dedup_key": message.dedup_key}
        body = {
            "event_action": "trigger",
            "dedup_key": message.dedup_key,
            "client": "RetryOps",
            "payload": {
                "summary": _cut(message.summary, PAGERDUTY_MAX_SUMMARY),
                # The RetryOps installation that saw the failure.
                "source": urlsplit(settings.RETRYOPS_PUBLIC_URL).netloc or "retryops",
                "severity": message.severity,
                "timestamp": timezone.now().isoformat(),
                "custom_details": message.details,
            },
        }
        if message.link:
            body["client_url"] = message.link
            body["links"] = [{"href": message.link, "text": f"{message.subject_label} in RetryOps"}]
        return body

    def send(self, payload: dict) -> int:
        return self.post(settings.RETRYOPS_PAGERDUTY_URL,
                         {"routing_key": settings.RETRYOPS_PAGERDUTY_ROUTING_KEY, **payload})


# Every channel a notification goes to, in the order they are queued.
NOTIFIERS: dict[str, type[Notifier]] = {cls.channel: cls for cls in (PagerDutyNotifier, SlackNotifier)}


def notifier_for(channel: str) -> Notifier:
    return NOTIFIERS[channel]()
