"""Probation: a probationary quarantine gets a probe after its cooldown, through real workers."""

import threading
from datetime import timedelta

import pytest
from django.db import DatabaseError, connection, transaction
from django.utils import timezone

from resources.choices import EventKind, ResourceState
from resources.models import Resource, ResourceEvent
from scheduling import services
from scheduling.choices import TaskState
from scheduling.models import Task
from tests.factories import ResourceFactory, RetryPolicyFactory
from tests.scheduling.helpers import work
from tests.scheduling.services.test_attempt_races import wait_for_lock_wait

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def probation_policy(db):
    return RetryPolicyFactory(name="probation", probation_cooldown_seconds=600, non_retryable_error_patterns=[
        {"pattern": "risk control", "action": "quarantine", "probation": True},
        {"pattern": "banned", "action": "quarantine", "probation": False},
    ])


def quarantined_by(pool, error):
    task = services.start_task(flow="demo", pool_name=pool, payload={"script": [error]},
                               created_by="test", policy="probation")
    work()
    assert Task.objects.get(pk=task.pk).state == TaskState.DEAD
    return Resource.objects.get(pk=Task.objects.get(pk=task.pk).resource_id)


def later(seconds):
    return timezone.now() + timedelta(seconds=seconds)


def test_a_probationary_quarantine_gets_a_probe_after_its_cooldown(redis_conn, alice, probation_policy):
    resource = quarantined_by(alice.pool, "DemoFlowError: blocked by risk control")
    assert resource.state == ResourceState.QUARANTINED
    assert resource.probe_after - resource.quarantined_at == timedelta(seconds=600)
    assert services.start_probes() == []  # still cooling down
    Resource.objects.filter(pk=alice.pk).update(probe_after=timezone.now() - timedelta(seconds=1))
    assert len(services.start_probes()) == 1


def test_a_successful_probe_returns_the_resource_to_the_pool(redis_conn, alice, probation_policy):
    quarantined_by(alice.pool, "DemoFlowError: blocked by risk control")
    Task.objects.update(payload={"script": ["ok"]})  # the upstream block has been lifted
    Resource.objects.filter(pk=alice.pk).update(probe_after=timezone.now())
    [probe] = services.start_probes()
    work()
    row = Resource.objects.get(pk=alice.pk)
    assert (row.state, row.quarantine_reason, row.probe_after) == (ResourceState.AVAILABLE, "", None)
    assert Task.objects.get(pk=probe.pk).state == TaskState.SUCCEEDED
    kinds = list(ResourceEvent.objects.filter(resource=row).order_by("id").values_list("kind", flat=True))
    assert kinds[-3:] == [EventKind.PROBE_CLAIMED, EventKind.RELEASED_SUCCESS, EventKind.UNQUARANTINED]


def test_a_failed_probe_extends_the_quarantine_with_a_longer_cooldown(redis_conn, alice, probation_policy):
    quarantined_by(alice.pool, "DemoFlowError: blocked by risk control")
    Resource.objects.filter(pk=alice.pk).update(probe_after=timezone.now())
    [probe] = services.start_probes()
    work()
    row = Resource.objects.get(pk=alice.pk)
    assert row.state == ResourceState.QUARANTINED and row.probation_cooldown_seconds == 1200
    assert row.probe_after - row.quarantined_at == timedelta(seconds=1200)
    assert Task.objects.get(pk=probe.pk).state == TaskState.DEAD


def test_a_permanent_quarantine_never_gets_a_probe(redis_conn, alice, probation_policy):
    resource = quarantined_by(alice.pool, "DemoFlowError: account banned")
    assert resource.state == ResourceState.QUARANTINED and resource.probe_after is None
    assert services.start_probes(now=later(10 ** 7)) == []


def test_a_resource_on_probe_is_not_probed_twice(redis_conn, alice, probation_policy):
    quarantined_by(alice.pool, "DemoFlowError: blocked by risk control")
    Resource.objects.filter(pk=alice.pk).update(probe_after=timezone.now())
    assert len(services.start_probes()) == 1
    assert services.start_probes(now=later(10 ** 7)) == []


def test_a_probe_whose_lease_runs_out_leaves_the_quarantine_standing(redis_conn, alice, probation_policy):
    from resources.services import sweep_expired_leases

    quarantined_by(alice.pool, "DemoFlowError: blocked by risk control")
    Resource.objects.filter(pk=alice.pk).update(probe_after=timezone.now())
    [probe] = services.start_probes()
    sweep_expired_leases(now=later(10 ** 6))
    row = Resource.objects.get(pk=alice.pk)
    assert row.state == ResourceState.QUARANTINED and row.probe_after > timezone.now()
    work()  # the probe finds its lease gone and the resource quarantined: it ends, never retried
    assert Task.objects.get(pk=probe.pk).state == TaskState.DEAD
    assert Resource.objects.get(pk=alice.pk).state == ResourceState.QUARANTINED


def test_a_probe_that_cannot_start_is_postponed_so_the_resources_due_after_it_get_theirs(redis_conn, pool,
                                                                                         probation_policy):
    # One resource at a time in the pool, so each task is quarantined on the one just added.
    ResourceFactory(pool=pool, key="stuck@x")
    stuck = quarantined_by(pool, "DemoFlowError: blocked by risk control")
    ResourceFactory(pool=pool, key="waiting@x")
    waiting = quarantined_by(pool, "DemoFlowError: blocked by risk control")
    Task.objects.filter(resource=stuck).update(flow="renamed-away")  # its flow is gone from the settings
    Resource.objects.filter(pk=stuck.pk).update(probe_after=later(-60))
    Resource.objects.filter(pk=waiting.pk).update(probe_after=later(-30))

    assert services.start_probes(limit=1) == []  # the stuck one is first in line and cannot start...
    [probe] = services.start_probes(limit=1)  # ...and no longer keeps the next one from its probe

    assert probe.pinned_resource_id == waiting.pk
    row = Resource.objects.get(pk=stuck.pk)
    assert (row.state, row.probe_after > later(590)) == (ResourceState.QUARANTINED, True)
    event = ResourceEvent.objects.filter(resource=stuck).latest("id")
    assert event.kind == EventKind.QUARANTINED and "renamed-away" in event.reason and "next probe after" in event.reason


def test_no_probe_repeats_a_business_instance_that_succeeded_since_on_another_resource(redis_conn, pool,
                                                                                    instant_policy):
    from resources.choices import ResourceState as States
    from tests.scheduling.helpers import work as run_all

    RetryPolicyFactory(name="elsewhere", max_attempts=2, initial_delay_seconds=0, probation_cooldown_seconds=600,
                       retryable_error_patterns=[{"pattern": "captcha", "action": "retry_other_resource"}],
                       non_retryable_error_patterns=[{"pattern": "risk control", "action": "quarantine",
                                                      "probation": True}])
    ResourceFactory(pool=pool, key="first@x")
    ResourceFactory(pool=pool, key="second@x")
    # Order 42 fails on one account (captcha: try another), then dies on the other (risk control).
    order = services.start_task(flow="demo", pool_name=pool, created_by="shop", policy="elsewhere",
                                payload={"order": 42, "script": ["DemoFlowError: captcha", "DemoFlowError: risk control"]})
    run_all()
    assert Task.objects.get(pk=order.pk).state == TaskState.DEAD
    quarantined = Resource.objects.get(pool=pool, state=States.QUARANTINED)
    failed = Resource.objects.get(pool=pool, state=States.FAILED)
    # An operator runs order 42 again on the account it failed on first, and it succeeds there.
    copy = services.retry_resource(resource=failed, actor="ops:carol", policy="instant")
    Task.objects.filter(pk=copy.pk).update(payload={"order": 42})  # the demo script is per attempt: drop it
    run_all()
    assert Task.objects.get(pk=copy.pk).state == TaskState.SUCCEEDED
    Resource.objects.filter(pk=quarantined.pk).update(probe_after=later(-1))

    assert services.start_probes() == []  # a probe would run order 42 a second time

    event = ResourceEvent.objects.filter(resource=quarantined).latest("id")
    assert f"task {copy.pk}" in event.reason and "next probe after" in event.reason


def test_a_probe_locks_the_resource_before_its_business_instance_as_a_retry_does(redis_conn, alice, probation_policy):
    # A strict retry locks the resource, then the instance's first task; a probe taking them the
    # other way round deadlocks with it. Here the resource is held: the probe must wait for it
    # without holding the first task's lock meanwhile.
    quarantined_by(alice.pool, "DemoFlowError: blocked by risk control")
    first = Task.objects.get()
    Resource.objects.filter(pk=alice.pk).update(probe_after=timezone.now())
    held, release = threading.Event(), threading.Event()

    def hold_the_resource():
        with transaction.atomic():
            Resource.objects.select_for_update().get(pk=alice.pk)
            held.set()
            release.wait(10)
        connection.close()

    def probe():
        services.start_probes()
        connection.close()

    holder, prober = threading.Thread(target=hold_the_resource), threading.Thread(target=probe)
    holder.start()
    held.wait(10)
    prober.start()
    try:
        assert wait_for_lock_wait()
        with transaction.atomic():
            try:
                Task.objects.select_for_update(nowait=True).get(pk=first.pk)
                task_free = True
            except DatabaseError:
                task_free = False
    finally:
        release.set()
        holder.join(10)
        prober.join(10)
    assert task_free
