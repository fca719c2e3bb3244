"""scheduling.jobs: the RQ jobs and the periodic ones, on real Redis workers."""

from datetime import timedelta

import pytest
from django.utils import timezone

from resources.models import Resource
from scheduling import services
from scheduling.choices import TaskState
from scheduling.jobs import batch_tick_job, dispatch_job
from scheduling.models import BatchConfig, Task
from tests.scheduling.helpers import work

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


def test_manage_py_up_runs_the_periodic_steps_in_the_ops_process_and_the_flow_worker_takes_retries_first():
    from retryops.management.commands.up import Command
    from scheduling.queueing import FLOW_QUEUE, RETRY_QUEUE

    children = Command().child_processes("127.0.0.1:8000")
    assert children["ops"][0][-1] == "ops"
    flow_worker = children["worker"][0]
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
