"""Who may read /metrics: an allowed address (RETRYOPS_METRICS_ALLOW) with the token, when one is
set (RETRYOPS_METRICS_TOKEN); everyone else is told why not."""

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import Client

from retryops.env import env_networks

TOKEN = "s3cret-metrics-token-0123456789"

pytestmark = pytest.mark.django_db


@pytest.fixture
def token(settings):
    settings.RETRYOPS_METRICS_TOKEN = TOKEN
    return TOKEN


def get(**headers):
    return Client().get("/metrics", **headers)


def test_loopback_may_scrape_without_a_token_by_default():
    response = get()
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain; version=0.0.4")
    assert b"# TYPE task_retry_scheduled_total counter" in response.content


def test_a_scraper_asking_for_openmetrics_gets_it():
    response = get(HTTP_ACCEPT="application/openmetrics-text; version=1.0.0")
    assert response["Content-Type"].startswith("application/openmetrics-text")
    assert response.content.endswith(b"# EOF\n")


def test_an_address_outside_the_allow_list_is_refused_naming_it():
    response = get(REMOTE_ADDR="203.0.113.9")
    assert response.status_code == 403
    assert response.content.decode() == "/metrics refused: address 203.0.113.9 is not in RETRYOPS_METRICS_ALLOW\n"


def test_a_forwarded_for_header_is_ignored_without_trusted_proxies():
    response = get(REMOTE_ADDR="203.0.113.9", HTTP_X_FORWARDED_FOR="127.0.0.1")
    assert response.status_code == 403


def test_behind_one_trusted_proxy_the_address_it_saw_is_checked(settings):
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "NUM_PROXIES": 1}
    settings.RETRYOPS_METRICS_ALLOW = ["10.1.0.0/16"]
    assert get(REMOTE_ADDR="192.0.2.1", HTTP_X_FORWARDED_FOR="10.9.9.9, 10.1.2.3").status_code == 200
    assert get(REMOTE_ADDR="192.0.2.1", HTTP_X_FORWARDED_FOR="10.1.2.3, 10.9.9.9").status_code == 403


def test_a_dual_stack_servers_view_of_an_ipv4_client_is_checked_as_ipv4():
    assert get(REMOTE_ADDR="::ffff:127.0.0.1").status_code == 200


def test_a_missing_token_is_401_with_a_bearer_challenge(token):
    response = get()
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == 'Bearer realm="metrics"'
    assert "needs a bearer token" in response.content.decode()


def test_a_wrong_token_is_401_naming_it_invalid(token):
    response = get(HTTP_AUTHORIZATION="Bearer not-the-token")
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == 'Bearer realm="metrics", error="invalid_token"'
    assert response.content.decode() == "/metrics refused: the bearer token is wrong\n"


def test_another_scheme_than_bearer_is_401_saying_so(token):
    response = get(HTTP_AUTHORIZATION=f"Basic {TOKEN}")
    assert response.status_code == 401
    assert 'error="invalid_request"' in response["WWW-Authenticate"]


def test_the_right_token_from_an_allowed_address_is_200(token):
    assert get(HTTP_AUTHORIZATION=f"Bearer {TOKEN}").status_code == 200


def test_with_an_empty_allow_list_a_token_alone_lets_any_address_in(token, settings):
    settings.RETRYOPS_METRICS_ALLOW = []
    assert get(REMOTE_ADDR="198.51.100.4", HTTP_AUTHORIZATION=f"Bearer {TOKEN}").status_code == 200
    assert get(REMOTE_ADDR="198.51.100.4").status_code == 401


def test_an_address_not_allowed_is_refused_even_with_the_right_token(token):
    assert get(REMOTE_ADDR="203.0.113.9", HTTP_AUTHORIZATION=f"Bearer {TOKEN}").status_code == 403


def test_the_refusal_speaks_the_browsers_language():
    response = get(REMOTE_ADDR="203.0.113.9", HTTP_ACCEPT_LANGUAGE="zh-hans")
    assert "RETRYOPS_METRICS_ALLOW" in response.content.decode()
    assert "拒绝" in response.content.decode()


def test_only_reads_are_answered():
    assert Client().post("/metrics").status_code == 405


def test_the_allow_list_setting_refuses_a_typo_naming_the_variable(monkeypatch):
    monkeypatch.setenv("RETRYOPS_METRICS_ALLOW", "127.0.0.1/8")
    with pytest.raises(ImproperlyConfigured, match=r"RETRYOPS_METRICS_ALLOW: '127.0.0.1/8' is not an IP network"):
        env_networks("RETRYOPS_METRICS_ALLOW", "")


def test_the_allow_list_setting_takes_bare_addresses_and_networks(monkeypatch):
    monkeypatch.setenv("RETRYOPS_METRICS_ALLOW", " 10.0.0.0/8, ::1 ,192.0.2.7")
    assert env_networks("RETRYOPS_METRICS_ALLOW", "") == ["10.0.0.0/8", "::1/128", "192.0.2.7/32"]
