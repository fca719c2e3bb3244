"""preview_retry: what an operator's strict retry would meet now, asked of the retry's own checks."""

import pytest

from audit.models import AuditEntry
import resources.services
from resources.models import ResourceEvent
from scheduling import services
from scheduling.models import Task
from tests.factories import RetryPolicyFactory
from tests.scheduling.admin.conftest import order_42, run
from tests.scheduling.helpers import failed_there

pytestmark = pytest.mark.django_db


@pytest.fixture
def succeeded_on_held_alice(alice, instant_policy) -> Task:
    """Order 42 succeeded on alice; an external worker holds her now."""
    order = run(order_42(alice, policy="instant"))
    resources.services.claim_by_id(resource_id=alice.pk, holder="billing-worker-8")
    return order


def test_the_preview_of_a_held_resource_whose_last_task_succeeded_names_the_holder_and_the_succeeded_task(
        alice, succeeded_on_held_alice):
    preview = services.preview_retry(resource=alice.pk)

    assert preview.source == succeeded_on_held_alice
    assert (preview.unavailable.code, preview.unavailable.details["holder"]) == (
        "resource_unavailable", "billing-worker-8")
    assert preview.instance_refused.details["task_id"] == succeeded_on_held_alice.pk
    assert "succeeded already" in str(preview.instance_refused)
    assert preview.refusal is preview.unavailable  # the retry asks availability first


def test_the_preview_writes_nothing(alice, succeeded_on_held_alice):
    counts = Task.objects.count(), AuditEntry.objects.count(), ResourceEvent.objects.count()
    services.preview_retry(resource=alice.pk)
    assert (Task.objects.count(), AuditEntry.objects.count(), ResourceEvent.objects.count()) == counts


def test_the_preview_of_a_failed_resource_whose_last_task_died_promises_the_retry(alice):
    RetryPolicyFactory(name="once", max_attempts=1)
    dead = run(order_42(alice), error=TimeoutError("upstream slow"))
    preview = services.preview_retry(resource=alice.pk)
    assert (preview.source, preview.refusal) == (dead, None)


def test_retries_of_two_resources_one_dead_order_is_last_on_preview_one_start_and_one_task_live(
        alice, bob, instant_policy):
    RetryPolicyFactory(name="once", max_attempts=1)
    dead = run(order_42(alice, policy="once"), error=TimeoutError("upstream slow"))
    failed_there(dead, bob, number=2)

    first, second = services.preview_retries(resources=[alice, bob])

    assert (first.refusal, second.refusal.code, second.refusal.details["task_id"]) == (None, "task_live", dead.pk)
