"""Set-up shared by the benchmarks: Django on a database of their own, never the app's.

The benchmark database sits on the server the app uses (DATABASE_URL, else the local or the
embedded PostgreSQL), is named after the app's with `_bench` added (`retryops_bench`), and is
created and migrated here. It is kept between runs, so the million-row pool is built once;
`DROP DATABASE retryops_bench` removes it.
"""

import os
import sys
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parents[1]


def bench_database_url(app_url: str, suffix: str = "_bench") -> str:
    """The URL of the benchmark database beside the app's database at `app_url`; a benchmark
    that empties tables others keep passes its own `suffix` (`_bench_dlq`)."""
    parts = urlsplit(app_url)
    name = parts.path.lstrip("/") or "retryops"
    return urlunsplit(parts._replace(path=f"/{name}{suffix}"))


def setup_django(suffix: str = "_bench") -> None:
    """Point Django at the benchmark database (the app's name + `suffix`), create and migrate it,
    then set Django up."""
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "retryops.settings")
    from retryops import devservices

    url = bench_database_url(devservices.database_url(create=False), suffix)
    devservices.ensure_database(url)
    # Worker processes a benchmark starts inherit it from here.
    os.environ["DATABASE_URL"] = url

    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", interactive=False, verbosity=0)
