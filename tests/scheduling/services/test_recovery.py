"""scheduling.services.recovery: the dispatcher, on the real PostgreSQL and Redis."""

from datetime import timedelta

import django_rq
import pytest
from django.utils import timezone
from rq import SimpleWorker
from rq.utils import utcformat

from resources.choices import ResourceState
from resources.models import Resource
from retryops.errors import DomainError
from scheduling import services
from scheduling.choices import AttemptOutcome, TaskState
from scheduling.models import Attempt, RetryPolicy, Task
from scheduling.queueing import WORKER_QUEUES, queue_for
from scheduling.services.recovery import QUEUE_ORDER_SLACK, STRANDED, job_statuses
from tests.factories import ResourceFactory, RetryPolicyFactory
from tests.scheduling.helpers import work

pytestmark = pytest.mark.django_db(transaction=True)


def start(resource, script=None, policy="instant"):
    return services.start_task(flow="demo", pool_name=resource.pool, resource=resource, created_by="test",
                               policy=policy, payload={"script": script} if script else {})


def lose_redis_wakeup(redis_conn, task):
    """What a flushed or failed-over Redis leaves: the task waits in the database, no job anywhere."""
    redis_conn.flushdb()
    return task


def lost_attempt(resource, policy="instant"):
    """A running attempt whose worker died: its lease has run out."""
    task = start(resource, policy=policy)
    services.begin_attempt(task_id=task.pk, attempt_number=1)
    Resource.objects.filter(pk=resource.pk).update(leased_until=timezone.now() - timedelta(minutes=1), lapse_seen_at=timezone.now() - timedelta(hours=1))
    return task


def test_a_probe_whose_flow_is_gone_does_not_stop_the_dispatcher_pass(redis_conn, pool, alice, bob, instant_policy):
    banned = start(alice, ["PermissionError: HTTP 403 banned"])
    work()
    assert Resource.objects.get(pk=alice.pk).state == ResourceState.QUARANTINED
    Resource.objects.filter(pk=alice.pk).update(probe_after=timezone.now() - timedelta(minutes=1))
    Task.objects.filter(pk=banned.pk).update(flow="renamed-away")
    waiting = lose_redis_wakeup(redis_conn, start(bob))

    result = services.run_dispatcher()

    assert result["enqueued"] == 1 and result["probes"] == 0 and result["failed_steps"] == []  # the row failed alone
    assert services.dispatch_waiting() == []  # its wake-up is queued again
    work()
    assert Task.objects.get(pk=waiting.pk).state == TaskState.SUCCEEDED


def test_a_policy_whose_delay_overflows_does_not_stop_recovery_of_other_lost_attempts(redis_conn, pool, alice, bob,
                                                                                     instant_policy):
    broken = RetryPolicyFactory(name="broken", max_attempts=3)
    RetryPolicy.objects.filter(pk=broken.pk).update(initial_delay_seconds=float("inf"),
                                                     max_delay_seconds=float("inf"))
    bad = lost_attempt(alice, policy="broken")
    good = lost_attempt(bob)
    carol = ResourceFactory(pool=pool, key="carol@x")
    waiting = lose_redis_wakeup(redis_conn, start(carol))

    result = services.run_dispatcher()

    assert result["abandoned"] == 1 and result["failed_rows"] == 1
    assert Task.objects.get(pk=good.pk).state == TaskState.RETRYING
    bad_row = Task.objects.get(pk=bad.pk)
    assert bad_row.state == TaskState.RUNNING and "dispatcher could not recover" in bad_row.last_error
    assert set(services.dispatch_waiting()) == set()  # both good.pk and waiting.pk were enqueued by the pass
    work()
    assert Task.objects.get(pk=waiting.pk).state == TaskState.SUCCEEDED
    assert Task.objects.get(pk=good.pk).state == TaskState.SUCCEEDED


def test_an_overdue_retry_whose_job_is_stuck_in_the_scheduled_registry_is_woken(redis_conn, alice, default_policy):
    task = start(alice, ["TimeoutError: slow", "ok"], policy="default")
    work()
    task.refresh_from_db()
    scheduled = queue_for(2).scheduled_job_registry
    assert scheduled.get_job_ids() == [task.rq_job_id]
    # The worker holding RQ's scheduler lock died with its scheduler: nobody moves the job.
    Task.objects.filter(pk=task.pk).update(next_run_at=timezone.now() - timedelta(seconds=30))

    assert services.dispatch_waiting() == [task.pk]

    task.refresh_from_db()
    assert task.rq_job_id in queue_for(2).get_job_ids()
    work()
    assert Task.objects.get(pk=task.pk).state == TaskState.SUCCEEDED


def test_a_retry_not_yet_overdue_by_the_grace_is_left_to_rq_s_scheduler(redis_conn, alice, default_policy):
    task = start(alice, ["TimeoutError: slow", "ok"], policy="default")
    work()
    Task.objects.filter(pk=task.pk).update(next_run_at=timezone.now() - timedelta(seconds=1))
    assert services.dispatch_waiting() == []


def test_an_overdue_task_whose_job_started_on_a_worker_that_died_is_woken(redis_conn, alice, instant_policy):
    task = start(alice)
    dead = django_rq.get_worker("flows", worker_class=SimpleWorker)
    dead.register_birth()
    job, _ = dead.dequeue_job_and_maintain_ttl(timeout=1)
    dead.prepare_execution(job)
    dead.prepare_job_execution(job)
    # ...and the worker dies here, before begin_attempt recorded anything.
    assert job.get_status(refresh=True) == "started"
    Task.objects.filter(pk=task.pk).update(next_run_at=timezone.now() - timedelta(seconds=30))

    assert services.dispatch_waiting() == [task.pk]
    work()
    assert Task.objects.get(pk=task.pk).state == TaskState.SUCCEEDED
    assert Attempt.objects.get(task=task).outcome == AttemptOutcome.SUCCEEDED


def dequeue_and_die(queues, task):
    """A worker takes the task's job off its queue and its host dies before the work horse marks the
    job started: RQ still calls it queued. Serving one queue, RQ moves the id to the queue's
    :intermediate list (BLMOVE); serving several, as ours do, it pops it (BLPOP) and keeps no copy."""
    dead = django_rq.get_worker(*queues, worker_class=SimpleWorker)
    job, _ = dead.dequeue_job_and_maintain_ttl(timeout=1)
    assert job.id == Task.objects.get(pk=task.pk).rq_job_id and job.get_status(refresh=True) == "queued"
    Task.objects.filter(pk=task.pk).update(next_run_at=timezone.now() - timedelta(seconds=30))
    return job


def test_an_overdue_task_whose_job_a_dead_worker_left_in_the_intermediate_list_is_woken(redis_conn, alice,
                                                                                       instant_policy):
    task = start(alice)
    job = dequeue_and_die(["flows"], task)
    assert redis_conn.lrange("rq:queue:flows:intermediate", 0, -1) == [job.id.encode()]

    assert services.dispatch_waiting() == [task.pk]
    work()
    assert Task.objects.get(pk=task.pk).state == TaskState.SUCCEEDED
    assert Attempt.objects.get(task=task).outcome == AttemptOutcome.SUCCEEDED


def test_an_overdue_task_whose_job_a_dead_worker_popped_from_several_queues_is_woken(redis_conn, alice,
                                                                                    instant_policy):
    task = start(alice)
    dequeue_and_die(WORKER_QUEUES, task)

    assert services.dispatch_waiting() == [task.pk]
    work()
    assert Attempt.objects.get(task=task).outcome == AttemptOutcome.SUCCEEDED


def test_a_task_whose_job_is_off_its_queue_for_less_than_the_grace_is_left_to_its_worker(redis_conn, alice,
                                                                                        instant_policy):
    task = start(alice)
    dequeue_and_die(WORKER_QUEUES, task)
    Task.objects.filter(pk=task.pk).update(next_run_at=timezone.now() - timedelta(seconds=1))
    assert services.dispatch_waiting() == []


def taken_long_before_the_head(redis_conn, job):
    """What a queue shows once its head has moved on: the taken job was enqueued well before the head."""
    redis_conn.hset(job.key, "enqueued_at", utcformat(job.enqueued_at - 2 * QUEUE_ORDER_SLACK))


def test_an_overdue_backlog_stays_queued_and_its_stranded_job_is_woken(redis_conn, pool, alice, instant_policy):
    stranded = start(alice)
    taken_long_before_the_head(redis_conn, dequeue_and_die(WORKER_QUEUES, stranded))
    backlog = [services.start_task(flow="noop", pool_name=pool, created_by="test", policy="instant").pk
               for _ in range(40)]
    Task.objects.filter(pk__in=backlog).update(next_run_at=timezone.now() - timedelta(minutes=5))

    assert services.dispatch_waiting(limit=10) == [stranded.pk]


def test_a_job_taken_off_its_queue_within_the_slack_of_the_heads_enqueue_is_still_counted_on_it(
        redis_conn, pool, alice, instant_policy):
    taken = dequeue_and_die(WORKER_QUEUES, start(alice))
    head = services.start_task(flow="noop", pool_name=pool, created_by="test", policy="instant")
    head = Task.objects.get(pk=head.pk).rq_job_id

    assert job_statuses([taken.id, head], redis_conn) == {taken.id: "queued", head: "queued"}
    taken_long_before_the_head(redis_conn, taken)
    assert job_statuses([taken.id, head], redis_conn) == {taken.id: STRANDED, head: "queued"}


def test_only_the_jobs_asked_about_can_be_stranded(redis_conn, alice, instant_policy):
    # The dispatcher asks it only of overdue tasks' jobs: a stranded job within the grace is live anyway.
    taken = dequeue_and_die(WORKER_QUEUES, start(alice))

    assert job_statuses([taken.id], redis_conn, on_queue_of=set()) == {taken.id: "queued"}
    assert job_statuses([taken.id], redis_conn, on_queue_of={taken.id}) == {taken.id: STRANDED}


def test_an_overdue_retry_is_woken_behind_more_queued_tasks_than_one_dispatch_page(redis_conn, pool, alice,
                                                                                 default_policy):
    task = start(alice, ["TimeoutError: slow", "ok"], policy="default")
    work()
    # A backlog due before it, every one with its job queued (a burst nobody has run yet)...
    backlog = [services.start_task(flow="noop", pool_name=pool, created_by="test", policy="default").pk
               for _ in range(3)]
    Task.objects.filter(pk__in=backlog).update(next_run_at=timezone.now() - timedelta(minutes=5))
    # ...and its retry's job stuck in the scheduled registry (its scheduler died with its worker).
    Task.objects.filter(pk=task.pk).update(next_run_at=timezone.now() - timedelta(seconds=30))

    assert services.dispatch_waiting(limit=2) == [task.pk]


def test_a_job_hash_rq_cannot_read_does_not_stop_the_dispatch_of_other_tasks(redis_conn, alice, bob, instant_policy):
    # What a heartbeat landing after a result_ttl=0 job was deleted leaves behind (rq#1575).
    husk = lose_redis_wakeup(redis_conn, Task.objects.get(pk=start(alice).pk))
    redis_conn.hset(f"rq:job:{husk.rq_job_id}", "last_heartbeat", "2026-01-02T03:04:05.000000Z")
    lost = Task.objects.get(pk=start(bob).pk)
    redis_conn.delete(f"rq:job:{lost.rq_job_id}")  # Redis lost this one's job

    assert sorted(services.dispatch_waiting()) == sorted([husk.pk, lost.pk])

    work()
    assert Task.objects.filter(pk__in=[husk.pk, lost.pk], state=TaskState.SUCCEEDED).count() == 2


@pytest.mark.parametrize("limit", [0, -1, 1.5, True])
def test_a_dispatch_limit_that_is_not_a_positive_whole_number_is_bad_input(redis_conn, limit):
    with pytest.raises(DomainError) as refused:
        services.dispatch_waiting(limit=limit)
    assert (refused.value.code, refused.value.details["field"]) == ("bad_input", "limit")
