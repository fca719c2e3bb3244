"""URLs of the servers the tests use, for worker processes the tests start."""

import os
from urllib.parse import quote

from django.conf import settings
from django.db import connection

# RQ in tests uses its own Redis database, so flushing it never touches the app's queues.
# RETRYOPS_TEST_REDIS_DB lets two checkouts run their suites side by side on one Redis.
TEST_REDIS_DB = int(os.environ.get("RETRYOPS_TEST_REDIS_DB", "15"))


def database_url() -> str:
    """The test database (not the app's), for processes started by a test."""
    s = connection.settings_dict
    host = quote(s["HOST"] or "localhost", safe="")
    port = f":{s['PORT']}" if s["PORT"] else ""
    return f"postgresql://{s['USER']}@{host}{port}/{s['NAME']}"


def redis_url() -> str:
    url = settings.REDIS_URL
    if url.startswith("unix://"):
        return f"{url.split('?')[0]}?db={TEST_REDIS_DB}"
    base = url.rsplit("/", 1)[0] if url.count("/") > 2 else url
    return f"{base}/{TEST_REDIS_DB}"
