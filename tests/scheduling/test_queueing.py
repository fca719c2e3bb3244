"""scheduling.queueing: how wake-ups reach the workers, on the real Redis."""

import time
from datetime import UTC, datetime, timedelta

import django_rq
import pytest
from django.utils import timezone

from scheduling import services
from scheduling.choices import TaskState
from scheduling.models import Attempt, Task
from scheduling.queueing import WORKER_QUEUES
from tests.factories import ResourceFactory, RetryPolicyFactory
from tests.scheduling.helpers import CountingWorker

pytestmark = pytest.mark.django_db(transaction=True)


def burst_worker():
    return django_rq.get_worker(*WORKER_QUEUES, worker_class=CountingWorker)


def test_a_retry_due_in_under_half_a_second_is_delivered_once(redis_conn, alice):
    RetryPolicyFactory(name="short", max_attempts=3, initial_delay_seconds=0.4, max_delay_seconds=0.4)
    task = services.start_task(flow="demo", pool_name=alice.pool, created_by="test", policy="short",
                               payload={"script": ["TimeoutError: slow", "ok"]})
    worker = burst_worker()
    worker.work(burst=True)
    task.refresh_from_db()
    assert (task.state, task.attempt_count) == (TaskState.SUCCEEDED, 2)
    assert worker.deliveries == 2  # deliveries = attempts: no early arrivals deferred again


def test_a_due_retry_is_taken_before_fresh_tasks_queued_ahead_of_it(redis_conn, pool, alice, instant_policy):
    ResourceFactory.create_batch(5, pool=pool)
    retried = services.start_task(flow="demo", pool_name=pool, resource=alice, created_by="test", policy="instant",
                                  payload={"script": ["TimeoutError: slow", "ok"]})
    fresh = [services.start_task(flow="demo", pool_name=pool, created_by="test", policy="instant")
             for _ in range(5)]
    burst_worker().work(burst=True, max_jobs=2)  # the first attempt fails; then its retry, or a fresh task?
    assert Task.objects.get(pk=retried.pk).state == TaskState.SUCCEEDED
    assert not Attempt.objects.filter(task__in=fresh).exists()


def test_a_wakeup_early_by_the_databases_clock_goes_back_on_the_queue_for_what_is_left(redis_conn, alice,
                                                                                      instant_policy):
    from django.db.models.functions import Now
    from rq.registry import ScheduledJobRegistry

    from scheduling.queueing import FLOW_QUEUE
    from scheduling.runner import run_attempt

    task = services.start_task(flow="demo", pool_name=alice.pool, created_by="test", policy="instant")
    # Due in 20 s by PostgreSQL's clock, whatever this host's clock says (`due` claims it is due now).
    Task.objects.filter(pk=task.pk).update(next_run_at=Now() + timedelta(seconds=20))
    django_rq.get_queue(FLOW_QUEUE).empty()
    assert run_attempt(task_id=task.pk, attempt_number=1, due=time.time()) is None
    assert not Attempt.objects.filter(task=task).exists()
    [job_id] = ScheduledJobRegistry(FLOW_QUEUE, connection=redis_conn).get_job_ids()
    at = ScheduledJobRegistry(FLOW_QUEUE, connection=redis_conn).get_scheduled_time(job_id)
    assert 18 <= (at - timezone.now()).total_seconds() <= 21


def test_the_flow_workers_scheduler_moves_a_wakeup_its_lead_before_it_is_due_not_a_whole_second(redis_conn):
    import math

    from retryops.worker import DueScheduler, Worker
    from scheduling.queueing import RETRY_QUEUE, SCHEDULER_LEAD, enqueue_attempt

    # Due at .5 of a second: RQ's own scheduler, which compares whole seconds, moves it half a second
    # early (whole-second scores) or late (exact ones).
    due = math.ceil(time.time()) + 1.5
    job_id = enqueue_attempt(task_id=1, attempt_number=2, at=datetime.fromtimestamp(due, tz=UTC))
    queue = django_rq.get_queue(RETRY_QUEUE)
    worker = django_rq.get_worker(*WORKER_QUEUES, worker_class=Worker)
    while job_id not in queue.job_ids:
        assert time.time() < due + 5, "never moved"
        worker._start_scheduler(burst=True)  # one pass of the worker's scheduler
        moved_at = time.time()
        time.sleep(0.01)
    assert isinstance(worker.scheduler, DueScheduler)
    assert due - SCHEDULER_LEAD <= moved_at < due + 0.4


def test_a_finished_wakeup_is_left_to_expire_in_redis_not_deleted_job_by_job(redis_conn, alice, instant_policy):
    from scheduling.queueing import RESULT_TTL

    task = services.start_task(flow="noop", pool_name=alice.pool, created_by="test", policy="instant")
    job_id = Task.objects.get(pk=task.pk).rq_job_id
    burst_worker().work(burst=True)
    assert Task.objects.get(pk=task.pk).state == TaskState.SUCCEEDED
    assert 0 < redis_conn.ttl(f"rq:job:{job_id}") <= RESULT_TTL
