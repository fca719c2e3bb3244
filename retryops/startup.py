"""What every process does before it serves or works: read the settings, so that a bad one stops
it with one line naming the variable (manage.py, and so rqworker, ops and up; gunicorn's master
through deploy/gunicorn.conf.py), rather than a traceback, or a start that fails later."""

import os
import sys
from contextlib import contextmanager

from django.core.exceptions import ImproperlyConfigured


@contextmanager
def refuse_bad_configuration():
    """A bad setting read in this block ends the process: one line on stderr, exit status 1."""
    try:
        yield
    except ImproperlyConfigured as exc:
        sys.exit(f"retryops: bad configuration: {exc}")


def read_settings_or_exit() -> None:
    """Import the settings module now (resolving DATABASE_URL and REDIS_URL, see devservices)."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "retryops.settings")
    from django.conf import settings

    with refuse_bad_configuration():
        settings.INSTALLED_APPS  # noqa: B018 - the first read imports the module
