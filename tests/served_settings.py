"""Settings of the web servers the tests start (tests/http_server.py, tests/test_static.py): the
app's, with what such a test chooses read from TEST_* variables of the tests' own: the folder of
collected static files (TEST_STATIC_ROOT), the runbooks' folder (TEST_RUNBOOK_DIR), and how long
a request's thread keeps its database connection (TEST_CONN_MAX_AGE; 0 unless said, so that 50
threads never keep 50 idle connections to the test server)."""

import os
from pathlib import Path

from retryops.settings import *  # noqa: F403
from retryops.settings import DATABASES, RETRYOPS_RUNBOOK_DIR, STATIC_ROOT

STATIC_ROOT = Path(os.environ.get("TEST_STATIC_ROOT") or STATIC_ROOT)
WHITENOISE_USE_FINDERS = not STATIC_ROOT.is_dir()
RETRYOPS_RUNBOOK_DIR = Path(os.environ.get("TEST_RUNBOOK_DIR") or RETRYOPS_RUNBOOK_DIR)
for _database in DATABASES.values():
    _database["CONN_MAX_AGE"] = int(os.environ.get("TEST_CONN_MAX_AGE", "0"))
