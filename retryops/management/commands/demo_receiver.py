"""A stand-in for Slack and PagerDuty on this machine, so the demo's pages arrive somewhere a
newcomer can see: `manage.py up` starts it and points the notifiers at it unless real ones are
configured. It answers as they do and checks nothing but that the body is JSON."""

import collections
import json
import signal
import sys
import threading
import uuid
from datetime import datetime, timezone
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable

from django.core.management.base import BaseCommand, CommandError
from django.utils.html import escape
from django.utils.translation import gettext

DEFAULT_PORT = 8025
SLACK_PATH = "/slack"
PAGERDUTY_PATH = "/pagerduty/v2/enqueue"
KEEP = 100
# A notifier's body is a few kilobytes; anything this large is not one of ours.
MAX_BODY = 1024 * 1024


def summary(channel: str, body) -> str:
    """One line saying what a message was: Slack's text, PagerDuty's action, dedup key and summary."""
    if not isinstance(body, dict):
        return f"{type(body).__name__} body"
    if channel == "slack":
        return " ".join(str(body.get("text", "")).split()) or "(no text)"
    about = (body.get("payload") or {}).get("summary", "") if isinstance(body.get("payload"), dict) else ""
    return " ".join(f"{body.get('event_action', '?')} {body.get('dedup_key', '')} {about}".split())


class Receiver(ThreadingHTTPServer):
    """The server with the last `keep` messages, newest first; `log` gets one line per message."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], *, keep: int = KEEP, log: Callable[[str], None] = print):
        super().__init__(address, Handler)
        self.messages: collections.deque[dict] = collections.deque(maxlen=keep)
        self.lock = threading.Lock()
        self.log = log

    def record(self, channel: str, body) -> None:
        line = summary(channel, body)
        if isinstance(body, dict):
            body = {key: value for key, value in body.items() if key != "routing_key"}  # a secret: never shown
        with self.lock:  # also keeps the log lines of concurrent requests whole
            self.messages.appendleft({"at": datetime.now(timezone.utc), "channel": channel, "summary": line,
                                      "body": body})
            self.log(f"{channel}: {line}")


class Handler(BaseHTTPRequestHandler):
    server: Receiver

    def do_POST(self):
        path = self.path.split("?", 1)[0]
        # A Slack webhook URL is /services/T.../B.../secret: any path under /slack will do.
        channel = ("slack" if path == SLACK_PATH or path.startswith(SLACK_PATH + "/")
                   else "pagerduty" if path == PAGERDUTY_PATH else None)
        if channel is None:
            return self.answer(HTTPStatus.NOT_FOUND, "text/plain", f"no receiver at {path}; use {SLACK_PATH} or "
                                                                    f"{PAGERDUTY_PATH}")
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if length < 0:
            return self.answer(HTTPStatus.BAD_REQUEST, "text/plain", "bad Content-Length")
        if length > MAX_BODY:
            return self.answer(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, "text/plain", "body too large")
        try:
            body = json.loads(self.rfile.read(length) or b"null")
        except ValueError:
            # As each would: Slack says invalid_payload, PagerDuty "invalid event"; both 400.
            if channel == "slack":
                return self.answer(HTTPStatus.BAD_REQUEST, "text/plain", "invalid_payload")
            return self.answer(HTTPStatus.BAD_REQUEST, "application/json", json.dumps(
                {"status": "invalid event", "message": "Event object is invalid", "errors": ["not JSON"]}))
        self.server.record(channel, body)
        if channel == "slack":
            return self.answer(HTTPStatus.OK, "text/plain", "ok")
        dedup_key = body.get("dedup_key") if isinstance(body, dict) else None
        return self.answer(HTTPStatus.ACCEPTED, "application/json", json.dumps(
            {"status": "success", "message": "Event processed", "dedup_key": dedup_key or uuid.uuid4().hex}))

    def do_GET(self):
        if self.path.split("?", 1)[0] != "/":
            return self.answer(HTTPStatus.NOT_FOUND, "text/plain", "the messages are at /")
        with self.server.lock:
            shown = list(self.server.messages)
        rows = "".join(
            f"<tr><td>{m['at']:%H:%M:%S}</td><td>{m['channel']}</td><td>{escape(m['summary'])}</td>"
            f"<td><details><summary>body</summary><pre>{escape(json.dumps(m['body'], indent=2, ensure_ascii=False))}"
            f"</pre></details></td></tr>" for m in shown)
        self.answer(HTTPStatus.OK, "text/html; charset=utf-8", (
            "<!doctype html><title>RetryOps demo receiver</title><h1>RetryOps demo receiver</h1>"
            f"<p>Slack webhook: POST {SLACK_PATH}; PagerDuty Events v2: POST {PAGERDUTY_PATH}. "
            f"The last {self.server.messages.maxlen} messages, newest first (UTC):</p>"
            f"<table border=1 cellpadding=4><tr><th>at</th><th>channel</th><th>message</th><th></th></tr>{rows}"
            "</table>" + ("" if shown else "<p>None yet.</p>")))

    def answer(self, status: HTTPStatus, content_type: str, text: str) -> None:
        data = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format, *args):
        pass  # Receiver.record logs one line per message; the access log would repeat it


class Command(BaseCommand):
    help = (f"Receive Slack webhook (POST {SLACK_PATH}) and PagerDuty Events v2 (POST {PAGERDUTY_PATH}) messages "
            "on this machine, answer as they do, log one line per message and show the last ones at GET /. "
            "`manage.py up` starts it for the demo.")

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1", help=gettext("Address to listen on (default 127.0.0.1)."))
        parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=gettext("Port (default %(port)s).") % {"port": DEFAULT_PORT})
        parser.add_argument("--keep", type=int, default=KEEP, help=gettext("Messages shown at / (default %(keep)s).") % {"keep": KEEP})

    def handle(self, *args, host, port, keep, **options):
        if keep < 1:
            raise CommandError(f"--keep must be at least 1, got {keep}")
        if not 0 <= port <= 65535:
            raise CommandError(f"--port must be from 0 to 65535, got {port}")
        try:
            server = Receiver((host, port), keep=keep, log=self.log)
        except OSError as exc:
            raise CommandError(f"cannot listen on {host}:{port}: {exc}") from None
        # serve_forever returns when SIGTERM (what `up` sends) raises SystemExit in this thread.
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        self.log(f"listening on http://{host}:{server.server_port}/ (Slack: POST {SLACK_PATH}, "
                 f"PagerDuty: POST {PAGERDUTY_PATH})")
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            server.server_close()

    def log(self, line: str) -> None:
        self.stdout.write(f"demo receiver: {line}")
        self.stdout.flush()
