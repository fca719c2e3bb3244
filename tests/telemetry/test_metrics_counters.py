"""Each counter and histogram of /metrics moves when its row is written: real flows run by a
burst worker, their dead letters collected as in production (right after the dying commit)."""

from datetime import timedelta

import pytest
from django.utils import timezone

from compensation.jobs import dead_letters_job
from scheduling import services
from tests.factories import (
    AttemptFactory,
    DeadLetterFactory,
    ResourceFactory,
    TaskFactory,
)
from tests.scheduling.helpers import work
from tests.telemetry.metrics_helpers import scrape, value

pytestmark = pytest.mark.django_db(transaction=True)

TIMEOUT, SUSPENDED = "TimeoutError: upstream slow", "PermissionError: HTTP 403: account suspended"


def run(pool, script, policy="instant", **payload):
    task = services.start_task(flow="demo", pool_name=pool, payload={"script": script, **payload}, created_by="test",
                               policy=policy)
    work()
    task.refresh_from_db()
    return task


def test_a_failure_that_schedules_a_retry_counts_in_task_retry_scheduled_total(redis_conn, alice, default_policy):
    run(alice.pool, [TIMEOUT, "ok"], policy="default")  # the retry waits its 120 s
    scraped = scrape()
    assert value(scraped, "task_retry_scheduled_total", flow="demo", pool="accounts", category="retryable") == 1
    assert value(scraped, "task_retry_success_total") == 0
    assert value(scraped, "task_retry_failure_total") == 0  # the first attempt is not a retry


def test_a_retry_that_succeeds_counts_in_task_retry_success_total_without_a_category(redis_conn, alice,
                                                                                   instant_policy):
    run(alice.pool, [TIMEOUT, "ok"])
    scraped = scrape()
    assert value(scraped, "task_retry_success_total", flow="demo", pool="accounts", category="none") == 1
    assert value(scraped, "task_retry_scheduled_total") == 1


def test_a_retry_that_fails_and_is_retried_counts_in_task_retry_failure_total(redis_conn, alice, instant_policy):
    run(alice.pool, [TIMEOUT, TIMEOUT, "ok"])
    scraped = scrape()
    assert value(scraped, "task_retry_failure_total", flow="demo", pool="accounts", category="retryable") == 1
    assert value(scraped, "task_retry_scheduled_total") == 2
    assert value(scraped, "task_retry_success_total") == 1


def test_a_task_that_dies_after_its_retries_counts_in_dlq_and_its_last_retry_as_failed(redis_conn, alice,
                                                                                      instant_policy):
    task = run(alice.pool, [TIMEOUT])  # three attempts, all failed
    assert task.state == "dead"
    scraped = scrape()
    assert value(scraped, "task_retry_dlq_total", flow="demo", pool="accounts", category="retryable") == 1
    assert value(scraped, "task_retry_failure_total") == 2  # attempt 2 (retried) and attempt 3 (dead)
    assert value(scraped, "task_retry_scheduled_total") == 2


def test_a_task_that_dies_at_its_first_attempt_counts_in_dlq_with_its_category_but_no_failed_retry(
        redis_conn, alice, instant_policy):
    run(alice.pool, [SUSPENDED])
    scraped = scrape()
    assert value(scraped, "task_retry_dlq_total", category="non_retryable") == 1
    assert value(scraped, "task_retry_failure_total") == 0


def test_each_dead_letter_put_on_a_work_order_counts_in_task_retry_escalated_total(redis_conn, pool, instant_policy):
    ResourceFactory.create_batch(2, pool=pool)
    run(pool, [TIMEOUT])  # opens the work order of its flow and signature
    run(pool, [TIMEOUT])  # joins it
    dead_letters_job()
    scraped = scrape()
    assert value(scraped, "task_retry_escalated_total", flow="demo", pool="accounts", category="retryable") == 2
    assert value(scraped, "dead_letter_to_work_order_seconds_count", flow="demo") == 2


def test_every_finished_attempt_is_observed_in_the_duration_histogram_by_outcome(redis_conn, alice, instant_policy):
    run(alice.pool, [TIMEOUT, "ok"], sleep=0.3, sleep_attempts=[2])
    scraped = scrape()
    succeeded = {"flow": "demo", "pool": "accounts", "outcome": "succeeded"}
    assert value(scraped, "task_attempt_duration_seconds_count", **succeeded) == 1
    assert value(scraped, "task_attempt_duration_seconds_bucket", le="0.25", **succeeded) == 0  # it slept 0.3 s
    assert value(scraped, "task_attempt_duration_seconds_bucket", le="+Inf", **succeeded) == 1
    assert value(scraped, "task_attempt_duration_seconds_sum", **succeeded) >= 0.3
    assert value(scraped, "task_attempt_duration_seconds_count", outcome="failed") == 1


def test_a_retry_is_observed_in_the_lateness_histogram_and_a_first_attempt_is_not(db, pool):
    now = timezone.now()
    task = TaskFactory(pool=pool, state="succeeded", next_run_at=None, finished_at=now)
    AttemptFactory(task=task, number=1, scheduled_for=now - timedelta(seconds=900), started_at=now - timedelta(
        seconds=500), outcome="failed", finished_at=now - timedelta(seconds=499))
    AttemptFactory(task=task, number=2, scheduled_for=now - timedelta(seconds=90), started_at=now, outcome="succeeded",
                   finished_at=now)
    scraped = scrape()
    labels = {"flow": "demo", "pool": pool.name}
    assert value(scraped, "task_retry_lateness_seconds_count", **labels) == 1
    assert value(scraped, "task_retry_lateness_seconds_bucket", le="60.0", **labels) == 0
    assert value(scraped, "task_retry_lateness_seconds_bucket", le="120.0", **labels) == 1
    assert value(scraped, "task_retry_lateness_seconds_sum", **labels) == pytest.approx(90)


def test_a_dead_letter_is_observed_from_its_tasks_death_to_its_collection(db, pool):
    DeadLetterFactory(task=TaskFactory(pool=pool, state="dead", next_run_at=None,
                                       finished_at=timezone.now() - timedelta(seconds=42)))
    scraped = scrape()
    assert value(scraped, "dead_letter_to_work_order_seconds_bucket", flow="demo", le="30.0") == 0
    assert value(scraped, "dead_letter_to_work_order_seconds_bucket", flow="demo", le="60.0") == 1
    assert value(scraped, "dead_letter_to_work_order_seconds_sum", flow="demo") == pytest.approx(42, abs=1)
