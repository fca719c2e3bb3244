"""How the app talks to PostgreSQL: settings that change what every statement costs."""

import os
import subprocess
import sys

import pytest
from django.conf import settings
from django.db import connection

from resources import services


@pytest.mark.django_db
def test_the_pools_hot_statements_are_prepared_after_a_few_runs(pool, alice):
    # Django turns psycopg's automatic prepared statements off unless OPTIONS names a threshold;
    # without it every claim is parsed and planned again.
    for _ in range(6):
        lease = services.claim_next(pool=pool.pk, holder="task 1")
        services.release(resource=lease.pk, lease_token=lease.lease_token, outcome="success")
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements WHERE statement LIKE %s",
                       ["%FOR UPDATE SKIP LOCKED%"])
        prepared = [row[0] for row in cursor.fetchall()]
    assert any("claimed AS" in statement for statement in prepared)


def test_a_transaction_pooler_turns_prepared_statements_off():
    code = ("import django, os; os.environ['DJANGO_SETTINGS_MODULE'] = 'retryops.settings'; django.setup(); "
            "from django.conf import settings; o = settings.DATABASES['default'].get('OPTIONS', {}); "
            "print(o.get('server_side_binding'), o.get('prepare_threshold'))")
    env = {**os.environ, "DB_TRANSACTION_POOLER": "true"}
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=settings.BASE_DIR, capture_output=True,
                         text=True, check=True).stdout.split()[-2:]
    assert out == ["None", "None"]


@pytest.mark.django_db
def test_the_apps_connections_never_jit_compile():
    # JIT compiling costs the console's filtered counts more than it ever saves (bench/admin.py).
    with connection.cursor() as cursor:
        cursor.execute("SHOW jit")
        assert cursor.fetchone() == ("off",)


def test_a_transaction_pooler_sends_no_startup_options():
    # pgbouncer refuses unknown startup parameters: behind it jit is set on the role instead.
    code = ("import django, os; os.environ['DJANGO_SETTINGS_MODULE'] = 'retryops.settings'; django.setup(); "
            "from django.conf import settings; print(repr(settings.DATABASES['default'].get('OPTIONS', {}).get('options')))")
    env = {**os.environ, "DB_TRANSACTION_POOLER": "true"}
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=settings.BASE_DIR, capture_output=True,
                         text=True, check=True).stdout.split()[-1]
    assert out == "None"
