"""An API key lives only in its client's hands: after it is made, used and mistyped, neither its
text nor its secret part is in any row of any table, in any log line, or in Redis."""

import logging

import django_rq
import pytest
from django.conf import settings
from django.core.cache import cache
from django.db import connection
from rest_framework.test import APIClient

from audit.services import create_api_client
from tests.api_fixtures import grant, keyed_client
from tests.telemetry.test_logs import formatter_of

pytestmark = pytest.mark.django_db


@pytest.fixture
def every_log_line():
    """Every record of every logger, at every level, as the app's own handler writes it."""
    lines: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record):
            lines.append(self.format(record))

    handler, root = Keep(level=logging.DEBUG), logging.getLogger()
    handler.setFormatter(formatter_of(settings.LOGGING))
    level, root.level = root.level, logging.DEBUG
    root.addHandler(handler)
    yield lines
    root.removeHandler(handler)
    root.setLevel(level)


def rows_holding(text: str) -> list[str]:
    """The tables of which a row, read as text, holds `text`."""
    found = []
    with connection.cursor() as cursor:
        for table in connection.introspection.table_names(cursor):
            cursor.execute(f'SELECT 1 FROM "{table}" AS t WHERE t::text LIKE %s LIMIT 1', [f"%{text}%"])
            if cursor.fetchone():
                found.append(table)
    return found


def redis_holding(text: str) -> list[str]:
    found = []
    for redis in (django_rq.get_connection("default"), cache._cache.get_client()):
        for key in redis.scan_iter(count=1000):
            if text.encode() in key or text.encode() in (redis.dump(key) or b""):
                found.append(key.decode(errors="replace"))
    return found


def test_a_used_and_mistyped_key_is_stored_and_logged_nowhere(django_user_model, every_log_line, redis_conn):
    user = django_user_model.objects.create_user(username="svc-billing")
    grant(user, "resources.view_resource")
    client, key = create_api_client(name="billing", user=user, actor="carol")
    secret_part = key.removeprefix(client.key_prefix + "_")
    assert keyed_client(key).get("/api/resources/").status_code == 200
    assert keyed_client(key[:-1] + ("A" if key[-1] != "A" else "B")).get("/api/resources/").status_code == 401
    assert APIClient().get("/api/resources/", HTTP_X_API_KEY=key).status_code == 200
    assert every_log_line, "the requests were logged: the search below looked at something"
    assert rows_holding(client.key_hash) == ["audit_apiclient"], "the search reads every table"
    for text in (key, secret_part):
        assert rows_holding(text) == []
        assert [line for line in every_log_line if text in line] == []
        assert redis_holding(text) == []
