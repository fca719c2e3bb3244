"""A body sent without Content-Length is refused (411) on every path, never read as empty."""

import pytest

pytestmark = pytest.mark.django_db


def test_a_chunked_post_to_the_console_is_refused_411(client):
    response = client.generic("POST", "/admin/login/", b"username=a&password=b",
                              content_type="application/x-www-form-urlencoded", HTTP_TRANSFER_ENCODING="chunked",
                              CONTENT_LENGTH="")
    assert response.status_code == 411
    assert "Content-Length" in response.content.decode()


def test_a_post_with_its_content_length_is_read_as_before(client):
    response = client.post("/admin/login/", {"username": "a", "password": "b"})
    assert response.status_code == 200  # the login form again, with its error: the body was read
