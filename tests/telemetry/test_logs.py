"""Structured logs: one JSON object a line from the web app and the workers, with the request, the
task, the attempt and the resource bound where known; plain text on request; a bad format refused."""

import io
import json
import logging
import subprocess
import sys

import httpx
import pytest
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from retryops.env import env_choice
from scheduling.models import Task
from telemetry.logs import GunicornErrorLine, logging_config
from tests.api_helpers import ok, post
from tests.factories import RetryPolicyFactory
from tests.http_server import ROOT, free_port, running
from tests.telemetry.processes import environment, manage


def formatter_of(config: dict) -> logging.Formatter:
    spec = dict(config["formatters"]["structured"])
    return spec.pop("()")(**spec)


@pytest.fixture
def web_log():
    """What this process logs, through the formatter settings.LOGGING gives its console handler."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(formatter_of(settings.LOGGING))
    logging.getLogger().addHandler(handler)
    yield stream
    logging.getLogger().removeHandler(handler)


def json_lines(text: str) -> list[dict]:
    """Every line of `text` as JSON: a line that is not fails the test."""
    return [json.loads(line) for line in text.splitlines() if line.strip()]


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_task_is_followed_from_the_api_request_into_the_worker_by_its_ids(api, alice, redis_conn, web_log):
    RetryPolicyFactory(name="instant", max_attempts=3, initial_delay_seconds=0)
    response = post(api, "/api/tasks/", {"flow": "demo", "pool": "accounts", "policy": "instant",
                                          "payload": {"script": ["TimeoutError: upstream slow", "ok"]}},
                    HTTP_X_REQUEST_ID="req-follow-me")
    task_id = ok(response, 201)["id"]
    worker = manage("rqworker", "retries", "flows", "--burst", stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                    text=True)
    out, err = worker.communicate(timeout=120)

    assert Task.objects.get(pk=task_id).state == "succeeded"
    web = [line for line in json_lines(web_log.getvalue()) if line.get("task_id") == task_id]
    assert web and {line["request_id"] for line in web} == {"req-follow-me"}
    lines = json_lines(err)  # every line the worker wrote, RQ's own included, is JSON
    assert out == "" and any(line["logger"].startswith("rq.") for line in lines)
    ours = [line for line in lines if line.get("task_id") == task_id]
    finished = [(line["attempt"], line["outcome"]) for line in ours if "outcome" in line]
    assert finished == [(1, "failed"), (2, "succeeded")]
    # The retry, enqueued by the worker itself, still carries the request that started the task.
    assert {(line["request_id"], line["resource_key"]) for line in ours} == {("req-follow-me", "alice@x")}
    assert all({"timestamp", "level", "logger", "event"} <= set(line) for line in lines)


def test_log_format_text_gives_plain_lines_with_the_bound_values():
    shell = manage("shell", "-c", "import logging; logging.getLogger('retryops.demo').warning("
                   "'slow upstream', extra={'task_id': 7})", env=environment(LOG_FORMAT="text"),
                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _, err = shell.communicate(timeout=60)
    line = next(line for line in err.splitlines() if "slow upstream" in line)
    assert not line.startswith("{")
    assert "[warning" in line and "[retryops.demo]" in line and "task_id=7" in line


def test_an_exception_is_one_json_line_with_its_traceback():
    record = logging.getLogger("retryops.demo").makeRecord(
        "retryops.demo", logging.ERROR, __file__, 1, "could not %s", ("store",), None)
    try:
        raise ValueError("NUL \x00 in a result")
    except ValueError:
        import sys

        record.exc_info = sys.exc_info()
    rendered = formatter_of(logging_config(log_format="json", level="INFO")).format(record)
    assert "\n" not in rendered
    line = json.loads(rendered)
    assert line["event"] == "could not store" and "ValueError: NUL \x00 in a result" in line["exception"]


def test_a_bad_log_format_stops_start_up_naming_the_variable():
    check = manage("check", env=environment(LOG_FORMAT="xml"), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                   text=True)
    _, err = check.communicate(timeout=60)
    assert check.returncode != 0
    assert "LOG_FORMAT='xml' is not one of json, text" in err


def test_env_choice_takes_any_case_and_refuses_the_rest(monkeypatch):
    monkeypatch.setenv("LOG_FORMAT", "TEXT")
    assert env_choice("LOG_FORMAT", "json", ("json", "text")) == "text"
    monkeypatch.setenv("LOG_FORMAT", "verbose")
    with pytest.raises(ImproperlyConfigured, match="LOG_FORMAT='verbose' is not one of json, text"):
        env_choice("LOG_FORMAT", "json", ("json", "text"))


def test_secret_keys_of_a_log_line_are_masked_at_any_depth(web_log):
    logging.getLogger("retryops.test").warning(
        "calling upstream", extra={"resource_attributes": {"region": "eu", "password": "hunter2"},
                                   "api_key": "k-123", "attempt": 2})
    [line] = [line for line in json_lines(web_log.getvalue()) if line["event"] == "calling upstream"]
    assert line["resource_attributes"] == {"region": "eu", "password": "******"}
    assert (line["api_key"], line["attempt"]) == ("******", 2)
    assert "hunter2" not in web_log.getvalue() and "k-123" not in web_log.getvalue()


def test_a_log_line_with_an_exception_still_renders_its_traceback_once_masked(web_log):
    try:
        raise ValueError("boom")
    except ValueError:
        logging.getLogger("retryops.test").exception("it failed", extra={"token": "t-1"})
    [line] = [line for line in json_lines(web_log.getvalue()) if line["event"] == "it failed"]
    assert line["token"] == "******"
    assert "ValueError: boom" in line["exception"]


def served_by_deployed_gunicorn(log_format: str, path: str, **headers: str) -> tuple[httpx.Response, str]:
    """GET `path` from gunicorn started as deploy/ starts it (its config, one worker, on loopback):
    the response and everything gunicorn wrote on standard error, up to its exit."""
    port = free_port()
    env = environment(GUNICORN_CMD_ARGS=f"--bind 127.0.0.1:{port} --threads 2", WEB_CONCURRENCY="1",
                      LOG_FORMAT=log_format)
    with running([sys.executable, "-m", "gunicorn", "--config", "deploy/gunicorn.conf.py", "retryops.wsgi:application"],
                 ready_url=f"http://127.0.0.1:{port}/healthz", cwd=ROOT, env=env) as server:
        response = httpx.get(f"http://127.0.0.1:{port}{path}", headers=headers, timeout=30)
    return response, server.stderr.read()


@pytest.mark.slow
@pytest.mark.django_db
def test_gunicorn_logs_each_request_as_a_json_line_with_the_request_id_the_app_answered_with():
    response, err = served_by_deployed_gunicorn("json", "/api/docs/?state=failed&state=dead&api_key=k-123",
                                                **{"User-Agent": "probe-script/1.0"})
    request_id = response.headers["X-Request-ID"]
    lines = json_lines(err)  # every line gunicorn wrote, its own start and stop included, is JSON
    assert any(line["logger"] == "gunicorn.error" and line["event"].startswith("Booting worker") for line in lines)
    # /healthz was asked too, until gunicorn answered.
    [access] = [line for line in lines if line["logger"] == "gunicorn.access" and line["path"] == "/api/docs/"]
    assert access["request_id"] == request_id
    assert {key: access[key] for key in ("method", "path", "status", "bytes", "remote_addr", "user_agent")} == {
        "method": "GET", "path": "/api/docs/", "status": 200, "bytes": len(response.content),
        "remote_addr": "127.0.0.1", "user_agent": "probe-script/1.0"}
    assert isinstance(access["duration_ms"], float) and access["duration_ms"] >= 0
    # The query string stays out of the path; its parameters are masked as the app masks a line.
    assert access["query"] == {"state": ["failed", "dead"], "api_key": "******"}
    assert "k-123" not in err


@pytest.mark.slow
@pytest.mark.django_db
def test_through_gunicorn_no_line_of_a_404_shows_a_secret_query_parameter():
    response, err = served_by_deployed_gunicorn("json", "/nope/?token=SECRETV6")
    assert response.status_code == 404
    lines = [line for line in json_lines(err) if line.get("path") == "/nope/"]
    assert {line["logger"] for line in lines} == {"django.request", "gunicorn.access"}
    assert all(line["query"] == {"token": "******"} for line in lines)
    assert "SECRETV6" not in err


@pytest.mark.slow
@pytest.mark.django_db
def test_gunicorn_logs_a_plain_access_line_with_the_request_id_under_log_format_text():
    response, err = served_by_deployed_gunicorn("text", "/api/docs/")
    [line] = [line for line in err.splitlines() if "[gunicorn.access]" in line and "/healthz" not in line]
    assert not line.startswith("{")
    assert "GET /api/docs/ 200" in line
    assert f"request_id={response.headers['X-Request-ID']}" in line


@pytest.mark.slow
@pytest.mark.django_db
def test_runserver_request_line_carries_the_request_id_the_app_answered_with():
    port = free_port()
    with running([sys.executable, "manage.py", "runserver", f"127.0.0.1:{port}", "--noreload"],
                 ready_url=f"http://127.0.0.1:{port}/healthz", cwd=ROOT, env=environment(LOG_FORMAT="json")) as server:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as http:  # one connection, one thread
            response = http.get("/api/docs/")
            http.get("/healthz")
    lines = [json.loads(line) for line in server.stderr.read().splitlines() if line.startswith("{")]
    served = {line["event"].split()[1]: line for line in lines if line["logger"] == "django.server"}
    assert served["/api/docs/"]["request_id"] == response.headers["X-Request-ID"]
    # A probe is answered before the app gives an id: its line has none, not the previous request's.
    assert served["/healthz"]["request_id"] is None and "request" not in served["/healthz"]


@pytest.mark.django_db
def test_djangos_line_of_a_404_has_the_query_masked_by_key_not_the_request_repr(client, web_log):
    client.get("/nope/?token=SECRETV6&state=failed")
    text = web_log.getvalue()
    [line] = [line for line in json_lines(text) if line["logger"] == "django.request"]
    assert "SECRETV6" not in text and "request" not in line
    assert (line["method"], line["path"], line["query"]) == ("GET", "/nope/", {"token": "******", "state": "failed"})


def test_gunicorns_error_handling_request_line_has_the_query_masked_by_key(web_log):
    try:
        raise RuntimeError("app iterator failed")
    except RuntimeError:
        logging.getLogger("gunicorn.error").exception("Error handling request %s %s", "GET", "/nope/?token=SECRETV6")
    text = web_log.getvalue()
    [line] = json_lines(text)
    assert "SECRETV6" not in text
    assert line["event"].startswith("Error handling request GET /nope/") and line["query"] == {"token": "******"}


def test_gunicorns_error_line_keeps_its_query_when_filtered_twice():
    # dictConfig adds a logger's filters without removing those a previous configuration added.
    record = logging.LogRecord("gunicorn.error", logging.ERROR, __file__, 1, "Error handling request %s %s",
                               ("GET", "/nope/?token=SECRETV6"), None)
    line = GunicornErrorLine()
    line.filter(record)
    line.filter(record)
    assert (record.getMessage(), record.query) == ("Error handling request GET /nope/", {"token": "SECRETV6"})
