"""Running RetryOps on a machine: `manage.py up`, the settings it runs with, and the benchmarks beside it."""

import http.cookiejar
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from datetime import timedelta
from io import StringIO
from pathlib import Path

import psutil
import psycopg
import pytest
from django.conf import global_settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.db import connection

from resources.models import Resource
from retryops import devservices
from retryops.management.commands.up import Command as Up
from scheduling import services
from scheduling.choices import TaskEventKind, TaskState
from scheduling.models import Attempt, BatchConfig, RetryPolicy, Task, TaskEvent
from tests import servers
from tests.factories import ResourceFactory, ResourcePoolFactory, RetryPolicyFactory
from tests.scheduling.helpers import work

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


@pytest.mark.django_db(transaction=True)
def test_the_new_demo_shows_a_retry_and_a_dead_task_on_its_first_pass(redis_conn):
    call_command("up", no_serve=True, stdout=StringIO())
    work()
    assert set(TaskEvent.objects.values_list("kind", flat=True)) >= {TaskEventKind.RETRY_SCHEDULED, TaskEventKind.DEAD}


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
def test_the_web_server_up_starts_leaves_no_idle_database_connections_behind(settings):
    # The server process checks the password with the real hashers, not the tests' quick one.
    settings.PASSWORD_HASHERS = global_settings.PASSWORD_HASHERS
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


@pytest.fixture
def no_channels(settings, monkeypatch):
    """Neither Slack nor PagerDuty configured, as on a newcomer's machine."""
    settings.RETRYOPS_SLACK_WEBHOOK_URL = ""
    settings.RETRYOPS_PAGERDUTY_ROUTING_KEY = ""
    for name in ("RETRYOPS_SLACK_WEBHOOK_URL", "RETRYOPS_PAGERDUTY_URL", "RETRYOPS_PAGERDUTY_ROUTING_KEY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(f"{name}_FILE", raising=False)
    return settings


def test_up_starts_a_demo_receiver_and_points_the_unconfigured_channels_at_it(no_channels):
    children = Up().child_processes("127.0.0.1:8000", receiver_port=8125)
    assert list(children) == ["worker", "ops", "web", "demo receiver"]
    assert children["demo receiver"][0][-3:] == ["demo_receiver", "--port", "8125"]
    for name in ("worker", "ops", "web"):
        env = children[name][1]
        assert (env["RETRYOPS_SLACK_WEBHOOK_URL"], env["RETRYOPS_PAGERDUTY_URL"],
                env["RETRYOPS_PAGERDUTY_ROUTING_KEY"]) == (
            "http://127.0.0.1:8125/slack", "http://127.0.0.1:8125/pagerduty/v2/enqueue", "retryops-demo")


def test_up_leaves_a_channel_the_operator_configured_to_its_settings(no_channels, monkeypatch):
    no_channels.RETRYOPS_SLACK_WEBHOOK_URL = "https://hooks.slack.com/services/T0/B0/x"
    monkeypatch.setenv("RETRYOPS_SLACK_WEBHOOK_URL", "https://hooks.slack.com/services/T0/B0/x")
    env = Up().child_processes("127.0.0.1:8000", receiver_port=8125)["worker"][1]
    assert env["RETRYOPS_SLACK_WEBHOOK_URL"] == "https://hooks.slack.com/services/T0/B0/x"
    assert env["RETRYOPS_PAGERDUTY_URL"] == "http://127.0.0.1:8125/pagerduty/v2/enqueue"


def test_up_starts_no_receiver_when_both_channels_are_configured(no_channels):
    no_channels.RETRYOPS_SLACK_WEBHOOK_URL = "https://hooks.slack.com/services/T0/B0/x"
    no_channels.RETRYOPS_PAGERDUTY_ROUTING_KEY = "e93facc04764012d7bfb002500d5d1a6"
    children = Up().child_processes("127.0.0.1:8000", receiver_port=8125)
    assert "demo receiver" not in children
    assert "RETRYOPS_PAGERDUTY_URL" not in children["worker"][1]


def test_up_says_where_the_receiver_is_and_what_configures_real_channels(no_channels):
    assert Up().notifications_summary(8125) == (
        "notifications: Slack to the demo receiver, http://127.0.0.1:8125/; PagerDuty to the demo receiver, "
        "http://127.0.0.1:8125/. Real Slack and PagerDuty are configured by RETRYOPS_SLACK_WEBHOOK_URL, "
        "RETRYOPS_PAGERDUTY_ROUTING_KEY and RETRYOPS_PAGERDUTY_URL")
    assert Up().notifications_summary(None).startswith(
        "notifications: Slack recorded as skipped; PagerDuty recorded as skipped.")


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


@pytest.mark.django_db
def test_up_keeps_a_policy_edited_in_the_admin_and_says_so():
    call_command("up", no_serve=True, no_demo=True, stdout=StringIO())
    RetryPolicy.objects.filter(name="default").update(max_attempts=9)  # as the admin would
    out = StringIO()
    call_command("up", no_serve=True, no_demo=True, stdout=out)
    assert RetryPolicy.objects.get(name="default").max_attempts == 9
    assert "existing ones were left as they are" in out.getvalue()


# Plays a `manage.py up` that started the process given as its second argument: it writes its run
# file into the folder given first, says so, and waits to be killed.
PRETEND_UP = (
    "import sys, time\n"
    "from pathlib import Path\n"
    "from retryops.processes import RunFiles\n"
    "RunFiles(Path(sys.argv[1])).write({'worker': int(sys.argv[2])})\n"
    "print('ready', flush=True)\n"
    "time.sleep(120)\n"
)


@pytest.fixture
def worker_left_running():
    """A process standing in for a worker of `up`, stopped after the test if it is still running."""
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    yield worker
    worker.kill()
    worker.wait(timeout=10)


@pytest.fixture
def run_folder(tmp_path, monkeypatch):
    monkeypatch.setattr(devservices, "EMBEDDED_DIR", tmp_path)
    return tmp_path / "up"


def pretend_up(run_folder: Path, worker: subprocess.Popen) -> subprocess.Popen:
    up = subprocess.Popen([sys.executable, "-c", PRETEND_UP, str(run_folder), str(worker.pid)], cwd=ROOT,
                          stdout=subprocess.PIPE, text=True)
    assert up.stdout.readline().strip() == "ready"
    return up


def crash(process: subprocess.Popen) -> None:
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=10)


def pretend_pid_was_reused(path: Path, dead: int, alive: int) -> None:
    """Make the file say `alive` where it said `dead`, as if the dead process's pid now belonged to
    a running one; everything else it records (such as a start time) stays."""
    path.write_text(re.sub(rf"\b{dead}\b", str(alive), path.read_text()))


def still_running(process: subprocess.Popen, timeout: float = 10) -> bool:
    try:
        process.wait(timeout=timeout)
        return False
    except subprocess.TimeoutExpired:
        return True


def test_a_restart_stops_what_a_crashed_up_left_running_and_says_so(run_folder, worker_left_running):
    crashed = pretend_up(run_folder, worker_left_running)
    crash(crashed)
    out = StringIO()
    Up(stdout=out).stop_leftovers()
    assert not still_running(worker_left_running)
    assert (f"stopped the worker (pid {worker_left_running.pid}) that a crashed manage.py up (pid {crashed.pid}) "
            "left running") in out.getvalue()
    assert list(run_folder.iterdir()) == []


def test_a_restart_leaves_the_children_of_a_running_up_alone(run_folder, worker_left_running):
    running = pretend_up(run_folder, worker_left_running)
    try:
        out = StringIO()
        Up(stdout=out).stop_leftovers()
        assert still_running(worker_left_running, timeout=1)
        assert out.getvalue() == ""
    finally:
        crash(running)


def test_a_crashed_up_whose_pid_was_reused_still_counts_as_crashed(run_folder, worker_left_running):
    crashed = pretend_up(run_folder, worker_left_running)
    crash(crashed)
    pretend_pid_was_reused(run_folder / f"{crashed.pid}.json", crashed.pid, os.getpid())
    Up(stdout=StringIO()).stop_leftovers()
    assert not still_running(worker_left_running)


# `manage.py` with devservices' folder (up's run files, the generated key) moved to argv[1], so that a
# test's `up` never meets the run files of the developer's own `up` in `.embedded/`.
MANAGE_IN_FOLDER = (
    "import runpy, sys; from pathlib import Path; from retryops import devservices; "
    "devservices.EMBEDDED_DIR = Path(sys.argv.pop(1)); runpy.run_path('manage.py', run_name='__main__')"
)


def manage_up(folder: Path, *args: str) -> list[str]:
    return [sys.executable, "-c", MANAGE_IN_FOLDER, str(folder), "up", *args]


def start_up(port: int, env: dict, folder: Path, *, receiver_port: int, demo: bool = False) -> subprocess.Popen:
    """`up` on `port` with its run files in `folder` and its output in `folder`/up.log, its demo receiver on
    `receiver_port` (a free one: never the default 8025, which another checkout's suite may hold), without
    the demo unless asked."""
    with open(folder / "up.log", "ab") as out:
        return subprocess.Popen(manage_up(folder, *([] if demo else ["--no-demo"]), "--addrport", f"127.0.0.1:{port}",
                                          "--receiver-port", str(receiver_port)),
                                cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)


def up_env() -> dict:
    """`up` on the test database and the test Redis."""
    return {**os.environ, "DATABASE_URL": servers.database_url(), "REDIS_URL": servers.redis_url()}


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_up_refuses_a_taken_web_port_naming_the_port_and_what_holds_it(tmp_path):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        up = subprocess.run(manage_up(tmp_path, "--no-demo", "--addrport", f"127.0.0.1:{port}"),
                            cwd=ROOT, env=up_env(), capture_output=True, text=True, timeout=120)
    assert up.returncode != 0
    assert f"port {port} is taken: pid {os.getpid()} listens there" in up.stderr
    assert "admin: http" not in up.stdout  # nothing was started


def wait_for(condition, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.2)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_after_a_kill_9_of_up_its_children_are_gone_and_a_restart_runs_retries_on_time(tmp_path, redis_conn):
    pool = ResourcePoolFactory(name="restarted")
    ResourceFactory(pool=pool, key="alice@x")
    RetryPolicyFactory(name="three-seconds", max_attempts=2, initial_delay_seconds=3)
    port, receiver_port = free_port(), free_port()
    env = up_env()
    started = []
    try:
        first = start_up(port, env, tmp_path, receiver_port=receiver_port)
        started.append(psutil.Process(first.pid))
        wait_until_answering(f"http://127.0.0.1:{port}/admin/login/", first)
        children = psutil.Process(first.pid).children(recursive=True)
        started += children
        assert len(children) >= 4  # the worker (and its scheduler), the ops process, the web server, the receiver

        crash(first)

        _, left = psutil.wait_procs(children, timeout=30)
        assert left == [], f"still running after up was killed: {[p.cmdline() for p in left]}"

        second = start_up(port, env, tmp_path, receiver_port=receiver_port)
        started.append(psutil.Process(second.pid))
        wait_until_answering(f"http://127.0.0.1:{port}/admin/login/", second)
        started += psutil.Process(second.pid).children(recursive=True)
        task = services.start_task(flow="demo", pool_name=pool, payload={"script": ["TimeoutError: slow", "ok"]},
                                   created_by="test", policy="three-seconds")
        wait_for(lambda: Task.objects.get(pk=task.pk).state == TaskState.SUCCEEDED, timeout=60)
        retry = Attempt.objects.get(task=task, number=2)
        assert retry.scheduled_for <= retry.started_at < retry.scheduled_for + timedelta(seconds=3)
    finally:
        stop_all(started)


def stop_all(processes: list[psutil.Process]) -> None:
    for process in processes:
        try:
            process.terminate()
        except psutil.Error:
            pass
    for process in psutil.wait_procs(processes, timeout=20)[1]:
        process.kill()


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_the_demo_s_dead_task_pages_the_receiver_that_up_starts(tmp_path, redis_conn, no_channels):
    port, receiver_port = free_port(), free_port()
    receiver = f"http://127.0.0.1:{receiver_port}/"
    started = []
    try:
        up = start_up(port, up_env(), tmp_path, receiver_port=receiver_port, demo=True)
        started.append(psutil.Process(up.pid))
        wait_until_answering(receiver, up)
        started += psutil.Process(up.pid).children(recursive=True)
        # The demo's second task dies at once: dead letter, work order, then its trigger and its Slack message.
        def received() -> str:
            return urllib.request.urlopen(receiver, timeout=5).read().decode()

        wait_for(lambda: "<td>pagerduty</td>" in received() and "<td>slack</td>" in received(), timeout=90)
        assert "trigger retryops/work_order/" in received()
        log = (tmp_path / "up.log").read_text()
        assert f"PagerDuty to the demo receiver, {receiver}" in log
        assert "demo receiver: pagerduty: trigger retryops/work_order/" in log
    finally:
        stop_all(started)


def run_file_children(folder: Path, up: subprocess.Popen) -> dict[str, int]:
    """The pids of `up`'s children, as its run file lists them (none before it is written)."""
    try:
        return {name: pid for name, (pid, _) in json.loads((folder / f"{up.pid}.json").read_text())["children"].items()}
    except (OSError, ValueError):
        return {}


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_up_restarts_a_child_that_dies_says_so_and_lists_its_new_pid(tmp_path, redis_conn):
    port, receiver_port = free_port(), free_port()
    started = []
    try:
        up = start_up(port, up_env(), tmp_path, receiver_port=receiver_port)
        started.append(psutil.Process(up.pid))
        wait_for(lambda: "ops" in run_file_children(tmp_path / "up", up), timeout=60)
        first = run_file_children(tmp_path / "up", up)
        started += psutil.Process(up.pid).children(recursive=True)

        os.kill(first["ops"], signal.SIGKILL)

        wait_for(lambda: run_file_children(tmp_path / "up", up).get("ops", first["ops"]) != first["ops"], timeout=30)
        again = run_file_children(tmp_path / "up", up)
        started.append(psutil.Process(again["ops"]))
        assert psutil.Process(again["ops"]).cmdline()[-1] == "ops"
        assert {name: pid for name, pid in again.items() if name != "ops"} == {
            name: pid for name, pid in first.items() if name != "ops"}
        assert (f"ops (pid {first['ops']}) exited with -9; restarting it in 1 s"
                in (tmp_path / "up.log").read_text())
        assert up.poll() is None
    finally:
        stop_all(started)
