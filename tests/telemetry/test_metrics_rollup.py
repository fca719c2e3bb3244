"""The rollup of the counters: a scrape is exact before, during and after a pass, whichever
process wrote the rows and in whatever order their transactions commit."""

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from django.db import transaction
from django.db.models import Sum

from scheduling.models import Task
from telemetry.metrics.models import MetricRollup
from telemetry.metrics.rollup import roll_up_metrics
from tests import servers
from tests.factories import (
    ResourceFactory,
    ResourcePoolFactory,
    TaskEventFactory,
    TaskFactory,
)
from tests.scheduling.helpers import in_thread
from tests.telemetry.metrics_helpers import counters, scrape, value

pytestmark = pytest.mark.django_db(transaction=True)
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def task(db):
    """The task the events are about, written first: a session holding an uncommitted insert of
    its pool or policy would make the other session's insert of the same name wait."""
    return TaskFactory(pool=ResourcePoolFactory(name="accounts"))


def successes(task, n: int) -> None:
    TaskEventFactory.create_batch(n, task=task, kind="task.retry.succeeded", attempt_number=2)


def rolled_up(metric: str = "task_retry_success_total") -> int:
    return MetricRollup.objects.filter(metric=metric).aggregate(n=Sum("count"))["n"] or 0


def roll_up_until(rolled: int, timeout: float = 120) -> None:
    """Pass after pass until the rollup holds `rolled` successes. The watermark stops below the
    oldest transaction running anywhere on the server, and other test runs share it; a pass is
    exact whatever it covers, so the tests only wait for one that covers their rows."""
    deadline = time.monotonic() + timeout
    while rolled_up() < rolled:
        assert time.monotonic() < deadline, f"the rollup holds {rolled_up()} after {timeout} s, not {rolled}"
        roll_up_metrics()
        time.sleep(0.05)
    assert rolled_up() == rolled


def test_a_scrape_counts_the_same_before_and_after_each_rollup_pass(task):
    roll_up_metrics()
    successes(task, 3)
    before = scrape()
    assert value(before, "task_retry_success_total") == 3
    roll_up_until(3)
    assert counters(scrape()) == counters(before)
    successes(task, 2)
    before = scrape()
    roll_up_until(5)
    assert counters(scrape()) == counters(before)
    assert value(before, "task_retry_success_total") == 5


def test_a_scrape_during_an_uncommitted_pass_counts_each_row_once(task):
    successes(task, 4)
    before = scrape()
    passed, release = threading.Event(), threading.Event()

    def pass_held_open():
        with transaction.atomic():
            roll_up_until(4)  # added to the rollup and moved the watermark, not committed yet
            passed.set()
            release.wait(timeout=180)

    thread = in_thread(pass_held_open)
    assert passed.wait(timeout=150)
    during = scrape()
    release.set()
    thread.join(timeout=180)
    assert rolled_up() == 4  # it committed
    assert counters(during) == counters(before) == counters(scrape())


def test_a_pass_skips_while_another_holds_the_watermark(task):
    successes(task, 1)
    passed, release = threading.Event(), threading.Event()

    def pass_held_open():
        with transaction.atomic():
            roll_up_metrics()
            passed.set()
            release.wait(timeout=180)

    thread = in_thread(pass_held_open)
    assert passed.wait(timeout=150)
    try:
        assert roll_up_metrics().skipped
    finally:
        release.set()
        thread.join(timeout=180)
    assert value(scrape(), "task_retry_success_total") == 1


def test_a_row_whose_transaction_commits_after_a_later_ones_pass_is_counted_once(task):
    """An event written early in a long transaction commits after events written later and
    rolled up since: the pass stops below that transaction, so nothing is lost or doubled."""
    written, release = threading.Event(), threading.Event()

    def long_transaction():
        with transaction.atomic():
            successes(task, 1)  # the older transaction id
            written.set()
            release.wait(timeout=180)

    thread = in_thread(long_transaction)
    assert written.wait(timeout=30)
    successes(task, 2)  # a younger transaction, committed first
    roll_up_metrics()
    assert value(scrape(), "task_retry_success_total") == 2
    release.set()
    thread.join(timeout=180)
    assert value(scrape(), "task_retry_success_total") == 3
    roll_up_until(3)
    assert value(scrape(), "task_retry_success_total") == 3


def test_counts_rolled_up_stay_when_their_rows_are_removed(task):
    successes(task, 2)
    roll_up_until(2)
    Task.objects.all().delete()
    assert value(scrape(), "task_retry_success_total") == 2


@pytest.mark.slow
def test_events_written_by_two_processes_both_show_in_one_scrape(redis_conn, instant_policy):
    tasks = 5
    for name in ("writer-a", "writer-b"):
        ResourceFactory(pool=ResourcePoolFactory(name=name))
    env = {**os.environ, "DATABASE_URL": servers.database_url(), "REDIS_URL": servers.redis_url()}
    writers = [subprocess.Popen([sys.executable, "-m", "tests.telemetry.event_writer", name, str(tasks)], cwd=ROOT,
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for name in ("writer-a", "writer-b")]
    for writer in writers:
        out, err = writer.communicate(timeout=120)
        assert writer.returncode == 0, err
        assert out.strip().splitlines()[-1] == str(tasks)
    scraped = scrape()
    for name in ("writer-a", "writer-b"):
        assert value(scraped, "task_retry_scheduled_total", pool=name, category="retryable") == tasks
        assert value(scraped, "task_retry_success_total", pool=name) == tasks
        assert value(scraped, "task_attempt_duration_seconds_count", pool=name) == 2 * tasks
