"""Fixtures and helpers of the notification tests: channels pointed at a real local HTTP server
(pytest-httpserver), and PagerDuty's published Events API v2 schema to check every body against."""

import json
import socket
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.utils import timezone
from jsonschema import Draft4Validator
from pytest_httpserver import HTTPServer

from compensation.notifications.models import Notification, NotificationState
from compensation.notifications.services import queue_notification, work_order_dedup_key

PAGERDUTY_SPEC = Path(django_settings.BASE_DIR) / "docs" / "reference" / "pagerduty-events-v2.openapi.json"
SLACK_PATH = "/services/T000/B000/XXXX"
PAGERDUTY_PATH = "/v2/enqueue"
ROUTING_KEY = "e93facc04764012d7bfb002500d5d1a6"


def pagerduty_event_validator() -> Draft4Validator:
    """The request body schema of POST /enqueue (trigger, acknowledge, resolve) from PagerDuty's
    OpenAPI 3.0 document, with the document's components beside it so its $refs resolve.
    OpenAPI 3.0 schemas are JSON Schema draft 4 with extensions."""
    spec = json.loads(PAGERDUTY_SPEC.read_text())
    body = spec["paths"]["/enqueue"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    schema = {**body, "components": spec["components"]}
    Draft4Validator.check_schema(schema)
    return Draft4Validator(schema)


def closed_port_url() -> str:
    """A URL nobody listens on: the connection is refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v2/enqueue"


@pytest.fixture
def slack_only(settings, httpserver):
    settings.RETRYOPS_SLACK_WEBHOOK_URL = httpserver.url_for(SLACK_PATH)
    settings.RETRYOPS_PAGERDUTY_ROUTING_KEY = ""
    return httpserver


@pytest.fixture
def pagerduty_only(settings, httpserver):
    settings.RETRYOPS_SLACK_WEBHOOK_URL = ""
    settings.RETRYOPS_PAGERDUTY_ROUTING_KEY = ROUTING_KEY
    settings.RETRYOPS_PAGERDUTY_URL = httpserver.url_for(PAGERDUTY_PATH)
    return httpserver


@pytest.fixture
def both_channels(settings, httpserver):
    settings.RETRYOPS_SLACK_WEBHOOK_URL = httpserver.url_for(SLACK_PATH)
    settings.RETRYOPS_PAGERDUTY_ROUTING_KEY = ROUTING_KEY
    settings.RETRYOPS_PAGERDUTY_URL = httpserver.url_for(PAGERDUTY_PATH)
    return httpserver


@pytest.fixture
def no_channels(settings):
    settings.RETRYOPS_SLACK_WEBHOOK_URL = ""
    settings.RETRYOPS_PAGERDUTY_ROUTING_KEY = ""


@pytest.fixture
def threaded_receiver():
    """A receiver that answers requests side by side (the shared one answers one at a time)."""
    server = HTTPServer(host="127.0.0.1", port=0, threaded=True)
    server.start()
    yield server
    server.clear()
    if server.is_running():
        server.stop()


def page(work_order_id: int = 7, **overrides) -> list[Notification]:
    """The trigger a work order sends when it opens."""
    values = {
        "event": "trigger",
        "dedup_key": work_order_dedup_key(work_order_id),
        "subject_id": work_order_id,
        "summary": f"Work order {work_order_id}: 12 dead letters of signup, TimeoutError upstream",
        "details": {"flow": "signup", "error_signature": "TimeoutError: upstream", "count": 12},
        "link": f"/admin/compensation/workorder/{work_order_id}/change/",
    }
    return queue_notification(**{**values, **overrides})


def resolve(work_order_id: int = 7) -> list[Notification]:
    """The resolve a work order sends when it is compensated or closed."""
    return queue_notification(event="resolve", dedup_key=work_order_dedup_key(work_order_id),
                              subject_id=work_order_id, summary=f"Work order {work_order_id} compensated",
                              details={"resolution": "refunded"},
                              link=f"/admin/compensation/workorder/{work_order_id}/change/")


def make_due() -> None:
    """Bring every queued notification's next attempt to now, as if its backoff had passed."""
    Notification.objects.filter(state=NotificationState.QUEUED).update(next_attempt_at=timezone.now())


def bodies(server: HTTPServer, path: str) -> list[dict]:
    return [json.loads(request.get_data()) for request, _ in server.log if request.path == path]


def accept(server: HTTPServer) -> None:
    """The receiver answers as Slack and PagerDuty do when they take a message."""
    server.expect_request(PAGERDUTY_PATH).respond_with_json({"status": "success"}, status=202)
    server.expect_request(SLACK_PATH).respond_with_data("ok")
