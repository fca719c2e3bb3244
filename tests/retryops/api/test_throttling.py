"""Throttling per client, counted in Redis: reads and writes apart, 429 with Retry-After."""

import pytest
from django.core.cache import cache

from tests.api_fixtures import keyed_client

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def probe_urls(settings):
    settings.ROOT_URLCONF = "tests.retryops.api.urls"
    settings.RETRYOPS_API_READ_RATE = "3/min"
    settings.RETRYOPS_API_WRITE_RATE = "2/min"
    cache.clear()
    yield
    cache.clear()


@pytest.fixture
def billing(make_api_client):
    return keyed_client(make_api_client("billing", "resources.change_resource", "resources.view_resource")[1])


def test_a_client_past_its_rate_is_refused_with_429_and_told_when_to_come_back(billing):
    statuses = [billing.get("/api/probe/").status_code for _ in range(4)]
    assert statuses == [200, 200, 200, 429]
    response = billing.get("/api/probe/")
    error = response.json()["error"]
    assert error["code"] == "throttled"
    assert 1 <= int(response["Retry-After"]) <= 60 and error["details"]["retry_after"] == int(response["Retry-After"])


def test_reads_and_writes_are_counted_apart(billing):
    for _ in range(3):
        billing.get("/api/probe/")
    assert billing.post("/api/probe/", {"name": "a"}, format="json").status_code == 201


def test_each_client_has_its_own_count(billing, make_api_client):
    for _ in range(3):
        billing.get("/api/probe/")
    other = keyed_client(make_api_client("shipping", "resources.view_resource")[1])
    assert other.get("/api/probe/").status_code == 200


def test_a_request_is_counted_in_one_round_trip_to_redis(billing, monkeypatch):
    from redis.connection import Connection

    billing.get("/api/probe/")  # the window's first request
    sent = []
    send = Connection.send_packed_command
    monkeypatch.setattr(Connection, "send_packed_command", lambda self, *a, **k: sent.append(a) or send(self, *a, **k))
    assert billing.get("/api/probe/").status_code == 200
    assert len(sent) == 1


def test_the_count_is_kept_for_the_window_only(billing):
    billing.get("/api/probe/")
    [key] = cache._cache.get_client().keys("*throttle:read:*")
    assert 1 <= cache._cache.get_client().ttl(key) <= 61


def test_an_empty_rate_is_no_limit(billing, settings):
    settings.RETRYOPS_API_READ_RATE = ""
    assert {billing.get("/api/probe/").status_code for _ in range(5)} == {200}


def test_a_redis_that_does_not_answer_lets_requests_through(billing, settings):
    from django.test import override_settings

    with override_settings(CACHES={"default": {**settings.CACHES["default"], "LOCATION": "redis://127.0.0.1:9/0"}}):
        assert {billing.get("/api/probe/").status_code for _ in range(5)} == {200}


def test_an_anonymous_caller_cannot_dodge_its_limit_by_writing_its_own_forwarded_for():
    from rest_framework.test import APIRequestFactory
    from rest_framework.throttling import AnonRateThrottle

    request = APIRequestFactory().get("/api/schema/", HTTP_X_FORWARDED_FOR="10.9.9.9", REMOTE_ADDR="192.0.2.7")

    assert AnonRateThrottle().get_ident(request) == "192.0.2.7"


def test_a_busy_client_far_from_its_limit_is_counted_in_redis_once_a_batch(billing, settings, monkeypatch):
    from redis.connection import Connection

    settings.RETRYOPS_API_READ_RATE = "1000/min"  # a batch of 10
    sent = []
    send = Connection.send_packed_command
    monkeypatch.setattr(Connection, "send_packed_command", lambda self, *a, **k: sent.append(a) or send(self, *a, **k))
    assert {billing.get("/api/probe/").status_code for _ in range(20)} == {200}
    assert len(sent) == 2
    [key] = cache._cache.get_client().keys("*throttle:read:*")
    assert int(cache._cache.get_client().get(key)) == 20


def test_one_process_counting_in_batches_lets_exactly_its_limit_through():
    from retryops.api.throttles import _Pending

    pending, in_redis, allowed, round_trips = _Pending(), 0, 0, 0
    for _ in range(1100):
        adding, known = pending.add("throttle:write:client:1:60", 7, batch=10, limit=1000)
        if adding:
            in_redis += adding
            known, round_trips = in_redis, round_trips + 1
            pending.heard("throttle:write:client:1:60", 7, known)
        allowed += known <= 1000
    assert allowed == 1000
    assert round_trips < 250
