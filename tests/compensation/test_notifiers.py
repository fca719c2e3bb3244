"""The notifier classes against a real local HTTP server: what each sends, and which failures
they call retryable."""

import time

import pytest
from werkzeug import Response

from compensation.notifications.notifiers import (
    Message,
    PagerDutyNotifier,
    SlackNotifier,
    TransportError,
)
from tests.compensation.notify_fixtures import (
    PAGERDUTY_PATH,
    ROUTING_KEY,
    SLACK_PATH,
    closed_port_url,
    pagerduty_event_validator,
)

OPENED = Message(event="trigger", dedup_key="retryops/work_order/7", subject_id=7, subject_label="work order 7",
                 summary="Work order 7: 12 dead letters of signup",
                 details={"flow": "signup", "error_signature": "TimeoutError: upstream", "count": 12},
                 link="http://ops.example/admin/compensation/workorder/7/change/")
CLOSED = Message(event="resolve", dedup_key="retryops/work_order/7", subject_id=7, subject_label="work order 7",
                 summary="Work order 7 compensated")


def send_pagerduty(server, message: Message) -> dict:
    server.expect_oneshot_request(PAGERDUTY_PATH, method="POST").respond_with_json(
        {"status": "success", "message": "Event processed", "dedup_key": message.dedup_key}, status=202)
    notifier = PagerDutyNotifier()
    status = notifier.send(notifier.build(message))
    assert status == 202
    (request, _), = server.log
    return request.get_json()


def failure_of(notifier, server, response: Response) -> TransportError:
    server.expect_request(PAGERDUTY_PATH).respond_with_response(response)
    server.expect_request(SLACK_PATH).respond_with_response(response)
    with pytest.raises(TransportError) as caught:
        notifier.send(notifier.build(OPENED))
    return caught.value


def test_slack_message_has_title_flow_signature_count_and_link(both_channels):
    both_channels.expect_oneshot_request(SLACK_PATH, method="POST").respond_with_data("ok")
    notifier = SlackNotifier()

    assert notifier.send(notifier.build(OPENED)) == 200

    (request, _), = both_channels.log
    body = request.get_json()
    assert body["text"].startswith("Work order 7: 12 dead letters of signup")
    header, fields, link, context = body["blocks"]
    assert header["type"] == "header" and "Work order 7: 12 dead letters of signup" in header["text"]["text"]
    assert [f["text"] for f in fields["fields"]] == ["*Flow*\nsignup", "*Error signature*\nTimeoutError: upstream",
                                                     "*Count*\n12"]
    assert link["text"]["text"] == ("<http://ops.example/admin/compensation/workorder/7/change/|"
                                    "Open work order 7 in RetryOps>")
    assert "retryops/work_order/7" in context["elements"][0]["text"]


def test_slack_escapes_markup_in_details(both_channels):
    message = Message(event="trigger", dedup_key="k", subject_id=1, subject_label="work order 1", summary="s",
                      details={"error_signature": "<!channel> & <http://evil|click>"})

    body = SlackNotifier().build(message)

    assert body["blocks"][1]["fields"][0]["text"] == ("*Error signature*\n&lt;!channel&gt; &amp; "
                                                      "&lt;http://evil|click&gt;")


def test_pagerduty_trigger_matches_the_published_schema_with_the_work_orders_dedup_key(both_channels):
    body = send_pagerduty(both_channels, OPENED)

    pagerduty_event_validator().validate(body)
    assert body["routing_key"] == ROUTING_KEY
    assert body["event_action"] == "trigger"
    assert body["dedup_key"] == "retryops/work_order/7"
    assert body["payload"]["severity"] == "error"
    assert body["payload"]["summary"] == "Work order 7: 12 dead letters of signup"
    assert body["payload"]["custom_details"] == {"flow": "signup", "error_signature": "TimeoutError: upstream",
                                                 "count": 12}
    assert body["links"][0]["href"] == OPENED.link


def test_pagerduty_resolve_matches_the_published_schema_with_the_same_dedup_key(both_channels):
    body = send_pagerduty(both_channels, CLOSED)

    pagerduty_event_validator().validate(body)
    assert body == {"routing_key": ROUTING_KEY, "event_action": "resolve", "dedup_key": "retryops/work_order/7"}


def test_pagerduty_summary_is_cut_to_1024_characters(both_channels):
    long = Message(**{**OPENED.__dict__, "summary": "x" * 5000})

    body = send_pagerduty(both_channels, long)

    pagerduty_event_validator().validate(body)
    assert len(body["payload"]["summary"]) == 1024


@pytest.mark.parametrize("notifier", [SlackNotifier(), PagerDutyNotifier()], ids=["slack", "pagerduty"])
def test_server_error_is_retryable(both_channels, notifier):
    error = failure_of(notifier, both_channels, Response("upstream broke", status=503))

    assert error.retryable and error.status_code == 503
    assert "HTTP 503: upstream broke" in str(error)


def test_rate_limit_is_retryable_after_the_time_asked(both_channels):
    error = failure_of(PagerDutyNotifier(), both_channels,
                       Response("slow down", status=429, headers={"Retry-After": "120"}))

    assert error.retryable and error.status_code == 429 and error.retry_after == 120


def test_a_refused_request_with_a_retry_after_that_is_no_number_stays_not_retryable(both_channels):
    error = failure_of(PagerDutyNotifier(), both_channels,
                       Response("bad request", status=400, headers={"Retry-After": "\u00b2"}))

    assert not error.retryable and error.status_code == 400 and error.retry_after is None


@pytest.mark.parametrize("status", [400, 401, 403, 404])
def test_refused_request_is_not_retryable(both_channels, status):
    error = failure_of(PagerDutyNotifier(), both_channels,
                       Response('{"status":"invalid event","errors":["routing_key"]}', status=status))

    assert not error.retryable and error.status_code == status
    assert "invalid event" in str(error)


def test_unreachable_endpoint_is_retryable_and_the_error_hides_the_url(settings):
    settings.RETRYOPS_SLACK_WEBHOOK_URL = closed_port_url().replace("/v2/enqueue", "/services/SECRET")

    with pytest.raises(TransportError) as caught:
        SlackNotifier().send({"text": "hi"})

    assert caught.value.retryable and caught.value.status_code is None
    assert "cannot reach Slack" in str(caught.value) and "SECRET" not in str(caught.value)


def test_timeout_is_retryable(both_channels, settings):
    settings.RETRYOPS_NOTIFY_TIMEOUT = 0.2
    both_channels.expect_request(PAGERDUTY_PATH).respond_with_handler(
        lambda request: time.sleep(0.5) or Response("late", status=202))

    with pytest.raises(TransportError) as caught:
        PagerDutyNotifier().send({"event_action": "resolve", "dedup_key": "k"})

    assert caught.value.retryable and "did not answer within 0.2 s" in str(caught.value)


def test_unconfigured_channel_names_the_missing_setting(no_channels):
    assert SlackNotifier().not_configured() == "RETRYOPS_SLACK_WEBHOOK_URL is not set"
    assert PagerDutyNotifier().not_configured() == "RETRYOPS_PAGERDUTY_ROUTING_KEY is not set"
