"""scheduling.jobs and scheduling.cron: the RQ jobs and the periodic ones, on real Redis workers."""

import time
from datetime import timedelta

import django_rq
import pytest
from django.utils import timezone
from rq.cron import CronScheduler

from resources.models import Resource
from scheduling import services
from scheduling.choices import TaskState
from scheduling.jobs import batch_tick_job, dispatch_job
from scheduling.models import BatchConfig, Task
from tests.scheduling.helpers import CountingWorker, work

pytestmark = pytest.mark.django_db(transaction=True)


def test_dispatch_job_re_enqueues_a_task_redis_lost(redis_conn, alice, instant_policy):
    task = services.start_task(flow="demo", pool_name=alice.pool, created_by="test", policy="instant")
    redis_conn.flushdb()
    result = dispatch_job()
    assert result["enqueued"] == 1 and result["failed_steps"] == []
    work()
    assert Task.objects.get(pk=task.pk).state == TaskState.SUCCEEDED


def test_dispatch_job_abandons_an_attempt_whose_worker_died(redis_conn, alice, instant_policy):
    task = services.start_task(flow="demo", pool_name=alice.pool, created_by="test", policy="instant")
    services.begin_attempt(task_id=task.pk, attempt_number=1)
    Resource.objects.filter(pk=alice.pk).update(leased_until=timezone.now() - timedelta(minutes=1), lapse_seen_at=timezone.now() - timedelta(hours=1))
    assert dispatch_job()["abandoned"] == 1
    assert Task.objects.get(pk=task.pk).state == TaskState.RETRYING


def test_batch_tick_job_starts_the_tasks_of_an_enabled_batch(redis_conn, pool, alice, bob, instant_policy):
    from scheduling.models import RetryPolicy

    BatchConfig.objects.create(name="signups", pool=pool, flow="demo", policy=RetryPolicy.objects.get(name="instant"),
                               payload={}, tasks_per_tick=2)
    batch_tick_job()
    assert Task.objects.filter(pool=pool).count() == 2


def test_a_periodic_job_queued_longer_than_its_interval_is_dropped_not_piled_up(redis_conn, settings):
    settings.RETRYOPS_DISPATCH_INTERVAL = 1
    scheduler = CronScheduler(connection=redis_conn)
    scheduler.load_config_from_file("scheduling.cron")
    dispatch = next(job for job in scheduler.get_jobs() if job.func is dispatch_job)
    for _ in range(3):  # the periodic worker is busy for three intervals; cron enqueues each time
        dispatch.enqueue(redis_conn)
        time.sleep(1.1)
    dispatch.enqueue(redis_conn)
    worker = django_rq.get_worker(dispatch.queue_name, worker_class=CountingWorker)
    worker.work(burst=True)
    assert worker.deliveries == 1


def test_periodic_jobs_have_a_worker_of_their_own_in_manage_py_up():
    from retryops.management.commands.up import Command
    from scheduling.queueing import FLOW_QUEUE, PERIODIC_QUEUE, RETRY_QUEUE

    workers = [argv for argv, _ in Command().child_processes("127.0.0.1:8000").values() if "rqworker" in argv]
    periodic = [argv for argv in workers if PERIODIC_QUEUE in argv]
    assert len(periodic) == 1
    assert FLOW_QUEUE not in periodic[0] and RETRY_QUEUE not in periodic[0]
    flow_worker = next(argv for argv in workers if FLOW_QUEUE in argv)
    assert flow_worker.index(RETRY_QUEUE) < flow_worker.index(FLOW_QUEUE)  # due retries before new work


def test_a_job_stores_errors_in_english_whatever_language_the_worker_speaks(redis_conn, alice, instant_policy):
    from django.utils import translation

    import resources.services
    from scheduling.jobs import run_attempt_job

    task = services.start_task(flow="demo", pool_name=alice.pool, created_by="test", policy="instant", resource=alice)
    resources.services.claim_by_id(resource_id=alice.pk, holder="someone else")
    with translation.override("zh-hans"):  # a worker of a deployment whose LANGUAGE_CODE is zh-hans
        run_attempt_job(task.pk, 1)

    task.refresh_from_db()
    assert "alice@x is in use by someone else" in task.last_error
