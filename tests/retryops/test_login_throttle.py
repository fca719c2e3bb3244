"""The console's sign-in throttle: after AXES_FAILURE_LIMIT wrong passwords for one
username from one address, the right password is refused there too, saying why in the operator's
language, until the cool-off has passed; other users and other addresses are not affected."""

from datetime import timedelta

import pytest
from axes.models import AccessAttempt
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from django.utils import translation

PASSWORD = "Right-pw-2291"
HERE, ELSEWHERE = "198.51.100.7", "203.0.113.9"


@pytest.fixture(autouse=True)
def _throttle(settings):
    settings.AXES_FAILURE_LIMIT = 3
    settings.AXES_COOLOFF_TIME = timedelta(minutes=15)
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # many sign-ins per test


@pytest.fixture
def carol(db):
    return User.objects.create_user("carol", password=PASSWORD, is_staff=True, is_superuser=True)


@pytest.fixture
def dave(db):
    return User.objects.create_user("dave", password=PASSWORD, is_staff=True, is_superuser=True)


def sign_in(username, password, *, address=HERE, language="en", client=None):
    client = client or Client(REMOTE_ADDR=address, HTTP_ACCEPT_LANGUAGE=language)
    return client.post(reverse("admin:login"), {"username": username, "password": password,
                                                "next": reverse("admin:index")}, REMOTE_ADDR=address)


def signed_in(response) -> bool:
    return response.status_code == 302 and response.url == reverse("admin:index")


def fail(username, times, *, address=HERE):
    for _ in range(times):
        response = sign_in(username, "wrong", address=address)
        assert not signed_in(response)
    return response


def test_the_right_password_signs_in_after_fewer_failures_than_the_limit(carol):
    fail("carol", 2)
    assert signed_in(sign_in("carol", PASSWORD))


def test_after_the_limit_the_right_password_is_refused_saying_why(carol):
    fail("carol", 3)
    response = sign_in("carol", PASSWORD)
    assert response.status_code == 429
    assert "Too many failed sign-ins for this username from your address" in response.content.decode()
    assert "15 minutes" in response.content.decode()


def test_the_lockout_page_speaks_chinese_to_a_chinese_browser(carol):
    fail("carol", 3)
    response = sign_in("carol", PASSWORD, language="zh-hans")
    assert response.status_code == 429
    with translation.override("zh-hans"):
        said = translation.gettext("Signing in is locked")
    assert said != "Signing in is locked" and said in response.content.decode()


def test_after_the_cool_off_the_right_password_signs_in_again(carol):
    fail("carol", 3)
    assert sign_in("carol", PASSWORD).status_code == 429
    # The cool-off has passed: the failures happened sixteen minutes ago.
    AccessAttempt.objects.update(attempt_time=AccessAttempt.objects.get().attempt_time - timedelta(minutes=16))
    assert signed_in(sign_in("carol", PASSWORD))


def test_another_user_from_the_same_address_is_not_locked(carol, dave):
    fail("carol", 3)
    assert signed_in(sign_in("dave", PASSWORD))


def test_the_same_user_from_another_address_is_not_locked(carol):
    fail("carol", 3)
    assert signed_in(sign_in("carol", PASSWORD, address=ELSEWHERE))


def test_a_forwarded_for_header_the_client_wrote_does_not_reset_its_count(carol):
    for n in range(3):
        Client(REMOTE_ADDR=HERE).post(reverse("admin:login"), {"username": "carol", "password": "wrong"},
                                      HTTP_X_FORWARDED_FOR=f"10.0.0.{n}")
    assert sign_in("carol", PASSWORD).status_code == 429


def test_a_locked_sign_in_is_recorded_with_its_username_and_address(carol):
    fail("carol", 3)
    attempt = AccessAttempt.objects.get()
    assert (attempt.username, attempt.ip_address, attempt.failures_since_start) == ("carol", HERE, 3)
