"""The built-in flows: http_call against a real local upstream."""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from resources.classification import classify
from resources.errors import LeaseMismatch
from scheduling.flows import FlowContext
from scheduling.flows.http_call import http_call

received = []
fences = []


class Upstream(BaseHTTPRequestHandler):
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        received.append((self.path, body, self.headers["Idempotency-Key"]))
        fences.append(self.headers["Fencing-Token"])
        status = int(self.path.partition("?")[0].strip("/") or 200)
        if status == 999:
            time.sleep(2)
            status = 200
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(json.dumps({"ok": status < 300}).encode())
        except BrokenPipeError:
            pass  # the client gave up (the timeout test)

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def upstream():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()


def context(**kwargs):
    return FlowContext(task_id=7, attempt=2, payload={"order": 42}, resource_key="alice@x",
                       resource_attributes={"region": "eu"}, idempotency_key="k:2", **kwargs)


def call(settings, url, timeout=5, **kwargs):
    settings.RETRYOPS_HTTP_CALL_URL, settings.RETRYOPS_HTTP_CALL_TIMEOUT = url, timeout
    return http_call(context(**kwargs))


def test_a_2xx_answer_is_success_and_carries_payload_and_attributes(settings, upstream):
    received.clear()
    assert call(settings, f"{upstream}/200") == {"ok": True}
    path, body, key = received[0]
    assert body == {"task": 7, "attempt": 2, "payload": {"order": 42},
                    "resource": {"key": "alice@x", "attributes": {"region": "eu"}}}
    assert key == "k:2"


def test_a_request_carries_the_business_instances_idempotency_key_and_the_fencing_token(settings, upstream):
    received.clear(), fences.clear()
    call(settings, f"{upstream}/200", fencing_token=41)
    assert (received[0][2], fences) == ("k:2", ["41"])


def test_nothing_is_sent_once_the_lease_is_gone(settings, upstream):
    def lease_gone():
        raise LeaseMismatch("the lease on resource 1 has run out", why="expired")

    received.clear()
    with pytest.raises(LeaseMismatch):
        call(settings, f"{upstream}/200", check_lease=lease_gone)
    assert received == []


@pytest.mark.parametrize("status, category", [(503, "retryable"), (429, "retryable"), (500, "retryable"),
                                              (401, "non_retryable"), (403, "non_retryable")])
def test_error_statuses_classify_as_the_operators_expect(settings, upstream, status, category):
    with pytest.raises(Exception) as caught:
        call(settings, f"{upstream}/{status}")
    assert classify(caught.value).category == category


def test_a_slow_upstream_times_out_as_retryable(settings, upstream):
    with pytest.raises(TimeoutError, match="timed out after 0.5s") as caught:
        call(settings, f"{upstream}/999", timeout=0.5)
    assert classify(caught.value).category == "retryable"


def test_a_refused_connection_is_retryable(settings):
    with pytest.raises(ConnectionError) as caught:
        call(settings, "http://127.0.0.1:1/")
    assert classify(caught.value).category == "retryable"


def test_no_configured_url_is_a_clear_error(settings):
    with pytest.raises(Exception, match="RETRYOPS_HTTP_CALL_URL is not set"):
        call(settings, "")


@pytest.mark.parametrize("path, timeout", [("/500", 5), ("/401", 5), ("/999", 0.5)])
def test_an_error_names_the_upstream_without_the_token_in_its_url(settings, upstream, path, timeout):
    # The message goes to the attempt, the dead letter, the work order's title and its Slack and
    # PagerDuty pages: a key in the URL's query must not go with it.
    with pytest.raises(Exception) as caught:
        call(settings, f"{upstream}{path}?api_key=k-s3cr3t", timeout=timeout)
    assert "s3cr3t" not in str(caught.value)
    assert f"{upstream}{path}" in str(caught.value)


def test_a_refused_connection_names_the_upstream_without_the_token_in_its_url(settings):
    with pytest.raises(ConnectionError) as caught:
        call(settings, "http://127.0.0.1:1/hook?token=k-s3cr3t")
    assert "s3cr3t" not in str(caught.value) and "http://127.0.0.1:1/hook" in str(caught.value)
