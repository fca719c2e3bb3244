"""Running RetryOps on a machine: `manage.py up`, the settings it runs with, and the benchmarks beside it."""

import http.cookiejar
import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from io import StringIO
from pathlib import Path

import psycopg
import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.db import connection

from resources.models import Resource
from retryops.management.commands.up import Command as Up
from scheduling.models import BatchConfig, RetryPolicy
from tests import servers

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.django_db
def test_up_prepares_policies_demo_data_and_an_admin_and_is_idempotent():
    out = StringIO()
    call_command("up", no_serve=True, stdout=out)
    assert "created the admin user: login admin, password " in out.getvalue()
    assert set(RetryPolicy.objects.values_list("name", flat=True)) >= {"default", "fast"}
    assert Resource.objects.filter(pool__name="demo-accounts").count() == 50
    assert BatchConfig.objects.get(name="demo-signups").retry_failed_first
    again = StringIO()
    call_command("up", no_serve=True, stdout=again)
    assert "exists already" in again.getvalue()
    assert get_user_model().objects.filter(is_superuser=True).count() == 1
    assert Resource.objects.filter(pool__name="demo-accounts").count() == 50


@pytest.mark.django_db
def test_up_on_a_later_run_says_how_to_set_the_admin_password():
    call_command("up", no_serve=True, no_demo=True, stdout=StringIO())
    again = StringIO()
    call_command("up", no_serve=True, no_demo=True, stdout=again)
    assert "manage.py changepassword admin" in again.getvalue()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def other_backends() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                       " AND pid <> pg_backend_pid()")
        return cursor.fetchone()[0]


def logged_in_admin(base: str, password: str) -> urllib.request.OpenerDirector:
    browser = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
    page = browser.open(f"{base}/admin/login/", timeout=10).read().decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)
    form = urllib.parse.urlencode({"username": "admin", "password": password, "csrfmiddlewaretoken": token})
    browser.open(urllib.request.Request(f"{base}/admin/login/?next=/admin/", data=form.encode(),
                                        headers={"Referer": f"{base}/admin/login/"}), timeout=10).read()
    return browser


def wait_until_answering(url: str, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(url, timeout=5).read()
            return
        except (ConnectionError, urllib.error.URLError):
            assert time.monotonic() < deadline and process.poll() is None, "the server did not answer"
            time.sleep(0.2)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_the_web_server_up_starts_leaves_no_idle_database_connections_behind():
    get_user_model().objects.create_superuser("admin", "admin@localhost", "s3cret-pass")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    cmd, env = Up().child_processes(f"127.0.0.1:{port}")["web"]
    web = subprocess.Popen(cmd, env={**env, "DATABASE_URL": servers.database_url()},
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until_answering(f"{base}/admin/login/", web)
        browser = logged_in_admin(base, "s3cret-pass")
        for page in ["/admin/", "/admin/resources/resource/", "/admin/scheduling/task/"] * 3:
            assert b"Log out" in browser.open(f"{base}{page}", timeout=10).read()
        settle = time.monotonic() + 5
        while other_backends() and time.monotonic() < settle:
            time.sleep(0.2)
        assert other_backends() == 0
    finally:
        web.terminate()
        web.wait(timeout=10)


def settings_under(**env: str) -> dict:
    """The default database's settings in a fresh process with `env` added to this one's."""
    script = ("import django, json; django.setup(); from django.conf import settings;"
              "print(json.dumps(settings.DATABASES['default'], default=str))")
    run = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60,
                         env={**os.environ, "DJANGO_SETTINGS_MODULE": "retryops.settings", **env})
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


def test_behind_a_transaction_pooler_no_server_side_cursors_nor_binding():
    database = settings_under(DB_TRANSACTION_POOLER="true")
    assert database["DISABLE_SERVER_SIDE_CURSORS"] is True
    assert not database.get("OPTIONS", {}).get("server_side_binding")


def test_without_a_pooler_server_side_binding_stays_on():
    database = settings_under()
    assert database["DISABLE_SERVER_SIDE_CURSORS"] is False
    assert database["OPTIONS"]["server_side_binding"] is True


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_the_claim_benchmark_runs_in_a_migrated_database_of_its_own():
    app_url = servers.database_url()
    script = ("import runpy; runpy.run_path('bench/claim.py', run_name='bench');"
              "from django.db import connection; from resources.models import ResourcePool;"
              "print(connection.settings_dict['NAME'], ResourcePool.objects.count())")
    run = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=180,
                         env={**os.environ, "DATABASE_URL": app_url})
    bench_name = None
    try:
        assert run.returncode == 0, run.stderr
        bench_name, pools = run.stdout.split()[-2:]
        assert bench_name != connection.settings_dict["NAME"]
        assert pools == "0"
    finally:
        if bench_name and bench_name != connection.settings_dict["NAME"]:
            with psycopg.connect(psycopg.conninfo.make_conninfo(app_url, dbname="postgres"), autocommit=True) as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{bench_name}" WITH (FORCE)')


def test_server_side_binding_behind_a_transaction_pooler_is_refused():
    script = "import django; django.setup()"
    run = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60,
                         env={**os.environ, "DJANGO_SETTINGS_MODULE": "retryops.settings",
                              "DB_TRANSACTION_POOLER": "true", "DB_SERVER_SIDE_BINDING": "true"})
    assert run.returncode != 0
    assert "DB_SERVER_SIDE_BINDING=true cannot work with DB_TRANSACTION_POOLER=true" in run.stderr


@pytest.mark.django_db
def test_up_keeps_a_policy_edited_in_the_admin_and_says_so():
    call_command("up", no_serve=True, no_demo=True, stdout=StringIO())
    RetryPolicy.objects.filter(name="default").update(max_attempts=9)  # as the admin would
    out = StringIO()
    call_command("up", no_serve=True, no_demo=True, stdout=out)
    assert RetryPolicy.objects.get(name="default").max_attempts == 9
    assert "existing ones were left as they are" in out.getvalue()
