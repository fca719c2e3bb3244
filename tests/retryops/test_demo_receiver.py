"""The demo receiver `manage.py up` starts: it answers Slack webhook and PagerDuty Events v2
posts as they do, logs one line per message and shows the last ones at /."""

import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from compensation.notifications.notifiers import Message, PagerDutyNotifier, SlackNotifier
from retryops.management.commands.demo_receiver import (
    PAGERDUTY_PATH,
    SLACK_PATH,
    Receiver,
)

ROOT = Path(__file__).resolve().parents[2]
TRIGGER = {"routing_key": "e93facc04764012d7bfb002500d5d1a6", "event_action": "trigger",
           "dedup_key": "retryops/work_order/7", "payload": {"summary": "demo: 3 dead letters", "source": "x",
                                                              "severity": "error"}}


@pytest.fixture
def logged():
    return []


@pytest.fixture
def receiver(logged):
    server = Receiver(("127.0.0.1", 0), keep=2, log=logged.append)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()
    thread.join(timeout=10)


def test_a_slack_message_is_answered_ok_and_logged_in_one_line(receiver, logged):
    response = httpx.post(f"{receiver}{SLACK_PATH}/services/T0/B0/x", json={"text": "work order 7\nopened"})
    assert (response.status_code, response.text) == (200, "ok")
    assert logged == ["slack: work order 7 opened"]


def test_a_pagerduty_event_is_accepted_with_its_dedup_key(receiver, logged):
    response = httpx.post(f"{receiver}{PAGERDUTY_PATH}", json=TRIGGER)
    assert response.status_code == 202
    assert response.json() == {"status": "success", "message": "Event processed",
                               "dedup_key": "retryops/work_order/7"}
    assert logged == ["pagerduty: trigger retryops/work_order/7 demo: 3 dead letters"]


def test_a_pagerduty_event_without_a_dedup_key_is_given_one(receiver):
    response = httpx.post(f"{receiver}{PAGERDUTY_PATH}", json={**TRIGGER, "dedup_key": None})
    assert response.status_code == 202 and len(response.json()["dedup_key"]) == 32


def test_a_body_that_is_not_json_is_refused_and_not_kept(receiver, logged):
    response = httpx.post(f"{receiver}{SLACK_PATH}", content=b"{not json", headers={"Content-Type": "application/json"})
    assert (response.status_code, response.text) == (400, "invalid_payload")
    assert logged == []


def test_a_post_elsewhere_is_not_found(receiver):
    assert httpx.post(f"{receiver}/teams", json={}).status_code == 404


def test_the_page_shows_the_last_messages_newest_first_without_the_routing_key(receiver):
    for n in range(3):
        httpx.post(f"{receiver}{SLACK_PATH}", json={"text": f"message {n}"})
    httpx.post(f"{receiver}{PAGERDUTY_PATH}", json=TRIGGER)
    page = httpx.get(f"{receiver}/").text
    assert page.index("demo: 3 dead letters") < page.index("message 2")
    assert "message 1" not in page  # it keeps the last two
    assert TRIGGER["routing_key"] not in page


def test_the_notifiers_messages_are_received_as_sent(receiver, settings, logged):
    settings.RETRYOPS_SLACK_WEBHOOK_URL = f"{receiver}{SLACK_PATH}"
    settings.RETRYOPS_PAGERDUTY_URL = f"{receiver}{PAGERDUTY_PATH}"
    settings.RETRYOPS_PAGERDUTY_ROUTING_KEY = "retryops-demo"
    message = Message(event="trigger", dedup_key="retryops/work_order/9", subject_id=9, subject_label="work order 9",
                      summary="demo: TimeoutError")
    assert SlackNotifier().send(SlackNotifier().build(message)) == 200
    assert PagerDutyNotifier().send(PagerDutyNotifier().build(message)) == 202
    assert logged == ["slack: demo: TimeoutError", "pagerduty: trigger retryops/work_order/9 demo: TimeoutError"]


@pytest.fixture
def unused_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.slow
def test_the_command_serves_until_sigterm(unused_port):
    receiver = subprocess.Popen([sys.executable, "manage.py", "demo_receiver", "--port", str(unused_port)],
                                cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert receiver.stdout.readline().startswith(f"demo receiver: listening on http://127.0.0.1:{unused_port}/")
        response = httpx.post(f"http://127.0.0.1:{unused_port}{SLACK_PATH}", json={"text": "hello"})
        assert (response.status_code, response.text) == (200, "ok")
        assert receiver.stdout.readline() == "demo receiver: slack: hello\n"
        receiver.send_signal(signal.SIGTERM)
        assert receiver.wait(timeout=10) == 0
    finally:
        receiver.kill()
        receiver.wait(timeout=10)


@pytest.mark.parametrize("port", ["99999", "-1"])
def test_a_port_out_of_range_is_an_error_naming_the_option(port):
    with pytest.raises(CommandError, match=f"--port must be from 0 to 65535, got {port}"):
        call_command("demo_receiver", "--port", port)

