import json

import pytest
from django.core.exceptions import ImproperlyConfigured

from retryops.env import (
    check_database_url,
    check_http_url,
    check_redis_url,
    env_addresses,
    env_bool,
    env_int,
    env_list,
    env_str,
)


def test_env_bool_rejects_a_value_that_is_not_a_boolean(monkeypatch):
    monkeypatch.setenv("DEBUG", "sometimes")
    with pytest.raises(ImproperlyConfigured, match="DEBUG='sometimes' is not a boolean"):
        env_bool("DEBUG", False)


def test_env_int_names_the_variable_and_the_minimum(monkeypatch):
    monkeypatch.setenv("SECURE_HSTS_SECONDS", "-1")
    with pytest.raises(ImproperlyConfigured, match="SECURE_HSTS_SECONDS=-1 must be at least 0"):
        env_int("SECURE_HSTS_SECONDS", 0, minimum=0)


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
@pytest.mark.parametrize("check, url, said", [(check_database_url, url, said) for url, said in [
    ("postgres://", "DATABASE_URL names no database: put its name after the host"),
    ("postgresql://db.example:5432/", "DATABASE_URL names no database"),
    ("mysql://x", "DATABASE_URL must start with postgresql:// or postgres:// or pgsql://, not mysql://"),
    ("postgis://db.example/retryops", "DATABASE_URL must start with postgresql:// or postgres:// or pgsql://, not "
                                      "postgis://"),
    ("notaurl", "DATABASE_URL is not a URL: it must start with postgresql://"),
    ("not a url", "DATABASE_URL contains a space or a control character"),
    ("postgresql://app@db.example:notaport/retryops", "DATABASE_URL has port 'notaport', which is not a number from 1 "
                                                      "to 65535"),
    ("postgresql://app@db.example:70000/retryops", "DATABASE_URL has port '70000', which is not a number"),
    ("postgresql://app@[::1]:0/retryops", "DATABASE_URL has port 0, which is not a number"),
    # Not "port '5432' is not a number": the bracket is what is wrong.
    ("postgresql://app@[::1:5432/retryops", "DATABASE_URL has a host with an unclosed [ (an IPv6 address goes in "
                                            "brackets, as in [::1]:5432)"),
]] + [(check_redis_url, url, said) for url, said in [
    ("redis://host:notaport", "REDIS_URL has port 'notaport', which is not a number from 1 to 65535"),
    ("http://x", "REDIS_URL must start with redis:// or rediss:// or unix://, not http://"),
    ("redis://", "REDIS_URL names no host"),
    ("redis://127.0.0.1:6379/abc", "REDIS_URL has database 'abc' after the host: it must be a number"),
    ("unix://", "REDIS_URL names no socket"),
    ("redis://127.0.0.1:6379/0?socket_timeout=soon", "REDIS_URL: Invalid value for 'socket_timeout'"),
    ("127.0.0.1:6379", "REDIS_URL is not a URL: it must start with redis://"),
]])
def test_a_malformed_database_or_redis_url_is_refused_saying_what_is_wrong(check, url, said):
    with pytest.raises(ImproperlyConfigured) as refused:
        check(url)
    assert str(refused.value).startswith(said)


@pytest.mark.parametrize("url", [
    "postgresql://app:s3cret@db.example:5432/retryops",
    "postgres://app@127.0.0.1/retryops?sslmode=require",
    # The embedded server's: its socket folder as an encoded host.
    "postgresql://postgres@%2Ftmp%2Fretryops-pg/retryops",
    "postgresql:///retryops",
    "postgresql://app:s3cr%2Fet%3Fp%23w@db.example:5432/retryops",
])
def test_a_postgresql_url_is_taken_as_it_is(url):
    assert check_database_url(url) == url


def test_a_refused_database_url_never_repeats_its_password():
    with pytest.raises(ImproperlyConfigured) as refused:
        check_database_url("postgresql://app:hunter2@db.example:54x2/retryops")
    assert "hunter2" not in str(refused.value)


@pytest.mark.parametrize("check, url", [
    (check_database_url, "postgresql://app:s3cr/etpw@db.example:5432/retryops"),
    (check_database_url, "postgresql://app:s3cr?etpw@db.example:5432/retryops"),
    (check_database_url, "postgresql://app:s3cr#etpw@db.example:5432/retryops"),
    # No colon: urlsplit would take "app" for the host and the rest of the password for the database.
    (check_database_url, "postgresql://app/s3cretpw@db.example:5432/retryops"),
    (check_redis_url, "redis://:s3cr/etpw@cache.example:6379/0"),
    (check_redis_url, "rediss://app:s3cr#etpw@cache.example:6380"),
])
def test_a_reserved_character_in_a_urls_password_is_named_without_repeating_the_password(check, url):
    with pytest.raises(ImproperlyConfigured) as refused:
        check(url)
    said = str(refused.value)
    assert said.endswith(": the user info (before '@') contains '/', '?' or '#': percent-encode them in the "
                         "password (%2F, %3F, %23)")
    assert not any(part in said for part in ("s3cr", "etpw", "app", "5432", "6379", "6380"))


def test_the_replica_url_with_a_reserved_character_in_its_password_is_named_as_the_replica():
    with pytest.raises(ImproperlyConfigured) as refused:
        check_database_url("postgresql://app:s3cr/etpw@replica.example/retryops", name="DATABASE_REPLICA_URL")
    assert str(refused.value).startswith("DATABASE_REPLICA_URL: the user info (before '@') contains")


@pytest.mark.parametrize("url", [
    # A web page's path may hold an @; only a port that fails to parse is blamed on the user info.
    "https://social.example/@retryops",
    "https://hooks.example/services/x?owner=ops@example.com",
])
def test_an_http_url_with_an_at_after_its_host_is_taken_as_it_is(url):
    assert check_http_url(url, name="RETRYOPS_HTTP_CALL_URL") == url


def test_an_http_url_whose_password_holds_a_slash_never_repeats_the_password():
    with pytest.raises(ImproperlyConfigured) as refused:
        check_http_url("https://app:s3cr/etpw@hooks.example/x", name="RETRYOPS_HTTP_CALL_URL")
    said = str(refused.value)
    assert said.startswith("RETRYOPS_HTTP_CALL_URL has a port that is not a number from 1 to 65535, or the user info")
    assert "s3cr" not in said and "etpw" not in said


@pytest.mark.parametrize("url", ["redis://127.0.0.1:6379/0", "rediss://:pw@cache.example:6380",
                                 "unix:///run/user@1000/redis.sock",
                                 "unix:///tmp/retryops-redis.sock", "redis://cache.example/15?socket_timeout=0.5",
                                 # Encoded, the reserved characters are an ordinary password.
                                 "redis://:s3cr%2Fet%3Fp%23w@cache.example:6379/0"])
def test_a_redis_url_is_taken_as_it_is(url):
    assert check_redis_url(url) == url


@pytest.mark.parametrize("url, said", [
    ("hooks.slack.com/services/x", "RETRYOPS_SLACK_WEBHOOK_URL is not a URL: it must start with http:// or https://"),
    ("https://hooks.slack.com:x/services/x", "RETRYOPS_SLACK_WEBHOOK_URL has port 'x'"),
    ("https:///services/x", "RETRYOPS_SLACK_WEBHOOK_URL names no host"),
])
def test_a_malformed_http_url_setting_is_refused_saying_what_is_wrong(url, said):
    with pytest.raises(ImproperlyConfigured) as refused:
        check_http_url(url, name="RETRYOPS_SLACK_WEBHOOK_URL")
    assert str(refused.value).startswith(said)


# A database host that drops packets fails a connection in seconds, not minutes


def connect_timeouts(**environment) -> dict:
    from tests.startup import start_up

    run = start_up("{alias: database['OPTIONS'].get('connect_timeout') for alias, database in "
                   "settings.DATABASES.items()}", **environment)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout.splitlines()[-1])


@pytest.mark.slow
def test_every_database_gets_a_connect_timeout_by_default():
    assert connect_timeouts(DATABASE_REPLICA_URL="postgresql://postgres@127.0.0.1:5432/y") == {
        "default": 10, "replica": 10}


@pytest.mark.slow
def test_a_database_urls_own_connect_timeout_wins_over_the_default():
    assert connect_timeouts(DATABASE_URL="postgresql://postgres@127.0.0.1:5432/x?connect_timeout=3",
                            DATABASE_REPLICA_URL="postgresql://postgres@127.0.0.1:5432/y") == {
        "default": 3, "replica": 10}


# RETRYOPS_REQUIRE_CONFIG: production refuses to fall back to this host's own servers and key


@pytest.mark.slow
def test_required_configuration_names_every_missing_variable_at_once():
    from tests.startup import start_up

    run = start_up(RETRYOPS_REQUIRE_CONFIG="true", DATABASE_URL="", SECRET_KEY="")
    assert run.returncode != 0
    assert ("ImproperlyConfigured: RETRYOPS_REQUIRE_CONFIG is true but these are unset or empty: DATABASE_URL, "
            "REDIS_URL (or REDIS_SENTINELS), SECRET_KEY (or SECRET_KEY_FILE);") in run.stderr


@pytest.mark.slow
def test_required_configuration_takes_the_sentinels_for_redis_and_a_file_for_the_key(tmp_path):
    from tests.startup import start_up

    key = tmp_path / "secret-key"
    key.write_text("k" * 50)
    run = start_up("[settings.SECRET_KEY == 'k' * 50, settings.REDIS_URL]", RETRYOPS_REQUIRE_CONFIG="true",
                   SECRET_KEY="", SECRET_KEY_FILE=str(key), REDIS_SENTINELS="10.0.0.5:26379",
                   REDIS_SENTINEL_MASTER="retryops")
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout.splitlines()[-1]) == [True, ""]


@pytest.mark.slow
def test_without_required_configuration_an_unset_redis_url_falls_back_to_this_hosts_own():
    from tests.startup import start_up

    run = start_up("settings.REDIS_URL", RETRYOPS_REQUIRE_CONFIG="false")
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout.splitlines()[-1]).startswith(("redis://127.0.0.1:6379", "unix://"))


@pytest.mark.slow
@pytest.mark.parametrize("public_url, secure", [("https://retryops.example.com", True),
                                                ("http://10.0.0.5:8000", False)])
def test_the_cookies_go_over_https_only_when_the_public_url_is_https(public_url, secure):
    from tests.startup import start_up

    run = start_up("[settings.SESSION_COOKIE_SECURE, settings.CSRF_COOKIE_SECURE]", RETRYOPS_PUBLIC_URL=public_url)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout.splitlines()[-1]) == [secure, secure]
