"""Probation probes whose lease is gone."""

from datetime import timedelta

import pytest
from django.utils import timezone

import resources.services
from resources.choices import EventKind, ResourceState
from resources.models import Resource, ResourceEvent
from scheduling import services
from scheduling.choices import TaskState
from scheduling.models import Task
from tests.factories import RetryPolicyFactory
from tests.scheduling.helpers import work

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def probe(redis_conn, alice):
    """A probe started for alice, quarantined on probation, with the last task's flow."""
    RetryPolicyFactory(name="probation", probation_cooldown_seconds=600, non_retryable_error_patterns=[
        {"pattern": "risk control", "action": "quarantine", "probation": True}])
    services.start_task(flow="demo", pool_name=alice.pool, payload={"script": ["DemoFlowError: risk control", "ok"]},
                        created_by="shop", policy="probation")
    work()
    Resource.objects.filter(pk=alice.pk).update(probe_after=timezone.now())
    [probe] = services.start_probes()
    return probe


def test_a_probe_whose_lease_was_swept_does_not_claim_the_unquarantined_resource(probe, alice):
    resources.services.sweep_expired_leases(now=timezone.now() + timedelta(hours=3))
    resources.services.unquarantine(resource=alice, actor="ops:carol", reason="fixed upstream")
    unquarantined_at = ResourceEvent.objects.get(resource=alice, kind=EventKind.UNQUARANTINED).pk

    work()

    task = Task.objects.get(pk=probe.pk)
    assert task.state == TaskState.DEAD and "probe lease" in task.last_error
    row = Resource.objects.get(pk=alice.pk)
    assert (row.state, row.lease_token) == (ResourceState.AVAILABLE, None)
    assert not ResourceEvent.objects.filter(resource=alice, pk__gt=unquarantined_at).exists()
