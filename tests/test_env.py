import pytest
from django.core.exceptions import ImproperlyConfigured

from retryops.env import env_addresses, env_bool, env_float, env_int, env_list, env_str


def test_env_bool_rejects_a_value_that_is_not_a_boolean(monkeypatch):
    monkeypatch.setenv("DEBUG", "sometimes")
    with pytest.raises(ImproperlyConfigured, match="DEBUG='sometimes' is not a boolean"):
        env_bool("DEBUG", False)


def test_env_int_names_the_variable_and_the_minimum(monkeypatch):
    monkeypatch.setenv("DB_CONN_MAX_AGE", "-1")
    with pytest.raises(ImproperlyConfigured, match="DB_CONN_MAX_AGE=-1 must be at least 0"):
        env_int("DB_CONN_MAX_AGE", 60, minimum=0)


def test_env_str_reads_secrets_from_a_file(monkeypatch, tmp_path):
    secret = tmp_path / "key"
    secret.write_text("s3cret\n")
    monkeypatch.setenv("SECRET_KEY_FILE", str(secret))
    assert env_str("SECRET_KEY") == "s3cret"


def test_env_str_with_an_unreadable_file_names_it(monkeypatch, tmp_path):
    monkeypatch.setenv("SECRET_KEY_FILE", str(tmp_path / "missing"))
    with pytest.raises(ImproperlyConfigured, match="SECRET_KEY_FILE=.*missing.* cannot be read"):
        env_str("SECRET_KEY")


def test_env_list_splits_on_commas(monkeypatch):
    monkeypatch.setenv("ALLOWED_HOSTS", "a.example, b.example,")
    assert env_list("ALLOWED_HOSTS", []) == ["a.example", "b.example"]


@pytest.mark.parametrize("raw, said", [("abc", "RETRYOPS_ALERT_FAILURE_RATE='abc' is not a number"),
                                       ("nan", "RETRYOPS_ALERT_FAILURE_RATE='nan' is not a finite number"),
                                       ("1e999", "RETRYOPS_ALERT_FAILURE_RATE='1e999' is not a finite number"),
                                       ("1.5", "RETRYOPS_ALERT_FAILURE_RATE=1.5 must be at most 1"),
                                       ("-0.1", "RETRYOPS_ALERT_FAILURE_RATE=-0.1 must be at least 0")])
def test_env_float_names_the_variable_and_what_is_wrong(monkeypatch, raw, said):
    monkeypatch.setenv("RETRYOPS_ALERT_FAILURE_RATE", raw)
    with pytest.raises(ImproperlyConfigured) as refused:
        env_float("RETRYOPS_ALERT_FAILURE_RATE", 0.15, minimum=0, maximum=1)
    assert str(refused.value) == said


def test_env_float_reads_a_decimal(monkeypatch):
    monkeypatch.setenv("RETRYOPS_ALERT_FAILURE_RATE", " 0.2 ")
    assert env_float("RETRYOPS_ALERT_FAILURE_RATE", 0.15) == 0.2


def test_env_int_names_the_variable_and_the_maximum(monkeypatch):
    monkeypatch.setenv("RETRYOPS_ALERT_INTERVAL", "3601")
    with pytest.raises(ImproperlyConfigured, match="RETRYOPS_ALERT_INTERVAL=3601 must be at most 3600"):
        env_int("RETRYOPS_ALERT_INTERVAL", 30, minimum=1, maximum=3600)


@pytest.mark.parametrize("raw", ["sentinel-a", "sentinel-a:", ":26379", "sentinel-a:port", "sentinel-a:70000",
                                 "::1:26379", "user@host:26379", "sentinel-a:２６３７９"])
def test_env_addresses_names_the_variable_and_the_bad_address(monkeypatch, raw):
    monkeypatch.setenv("REDIS_SENTINELS", f"10.0.0.5:26379, {raw}")
    with pytest.raises(ImproperlyConfigured, match=f"REDIS_SENTINELS: '{raw}' is not a host:port"):
        env_addresses("REDIS_SENTINELS")


def test_env_addresses_reads_hosts_and_bracketed_ipv6(monkeypatch):
    monkeypatch.setenv("REDIS_SENTINELS", "10.0.0.5:26379, sentinel-b:26380,[::1]:26381,")
    assert env_addresses("REDIS_SENTINELS") == [("10.0.0.5", 26379), ("sentinel-b", 26380), ("::1", 26381)]
