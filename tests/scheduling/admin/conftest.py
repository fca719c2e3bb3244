"""The console's actors and the resources they act on.

carol operates (every scheduling and resource permission, nothing else); dave only looks (the
view permissions). Tasks run their attempts in the test's own process (begin_attempt and
finish_attempt, as a worker would), so no Redis is needed and nothing runs behind the test's back."""

import pytest
from django.contrib.auth.models import Permission, User

import resources.services
from resources.models import Resource
from scheduling import services
from scheduling.models import Task
from tests.factories import ResourceFactory, RetryPolicyFactory

VIEW = ["view_task", "view_attempt", "view_resource", "view_resourcepool", "view_retrypolicy", "view_batchconfig"]
OPERATE = ["retry_resource", "cancel_task", "run_task_now"]


def staff_user(username: str, codenames: list[str]) -> User:
    user = User.objects.create_user(username=username, password="pw", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(codename__in=codenames))
    return user


@pytest.fixture
def carol(client, db):
    client.force_login(staff_user("carol", VIEW + OPERATE))
    return client


@pytest.fixture
def dave(client, db):
    client.force_login(staff_user("dave", VIEW))
    return client


@pytest.fixture
def once(db):
    """One attempt and no retry: a failure kills the task and leaves its resource failed."""
    return RetryPolicyFactory(name="once", max_attempts=1)


@pytest.fixture
def later(db):
    """Retries two minutes after a failure, holding the resource meanwhile."""
    return RetryPolicyFactory(name="later", max_attempts=5, initial_delay_seconds=120, max_delay_seconds=120)


def run(task: Task, *, error: BaseException | None = None) -> Task:
    """One attempt of `task` as a worker would run it, failing with `error` or succeeding."""
    number = Task.objects.get(pk=task.pk).attempt_count + 1
    started = services.begin_attempt(task_id=task.pk, attempt_number=number)
    services.finish_attempt(attempt=started.attempt, error=error, result=None if error else {"ok": True})
    return Task.objects.get(pk=task.pk)


def order_42(resource: Resource, policy: str = "once", **kwargs) -> Task:
    return services.start_task(flow="demo", pool_name=resource.pool, payload={"order": 42}, resource=resource,
                               created_by="shop", policy=policy, **kwargs)


@pytest.fixture
def dead_order(alice, once) -> Task:
    """Order 42 died on alice after a timeout; alice is failed."""
    return run(order_42(alice), error=TimeoutError("upstream slow"))


@pytest.fixture
def failed_alice(dead_order) -> Resource:
    return Resource.objects.get(pk=dead_order.pinned_resource_id)


@pytest.fixture
def quarantined_bob(bob) -> Resource:
    return resources.services.quarantine(resource=bob, actor="ops", reason="banned upstream")


@pytest.fixture
def waiting_order(alice, later) -> Task:
    """Order 42 failed once on alice and waits two minutes for its retry, holding alice."""
    return run(order_42(alice, policy="later"), error=TimeoutError("upstream slow"))


def another(pool, key: str) -> Resource:
    return ResourceFactory(pool=pool, key=key)


@pytest.fixture
def succeeded_order(alice, once) -> Task:
    """Order 42 succeeded on alice: her last task."""
    return run(order_42(alice))


@pytest.fixture
def externally_failed_alice(succeeded_order) -> Resource:
    """After order 42 succeeded, an external worker claimed alice (as over the API) and released her
    failed: she is failed, and her last task is the order that succeeded."""
    lease = resources.services.claim_by_id(resource_id=succeeded_order.pinned_resource_id, holder="billing-worker-7")
    return resources.services.release(resource=lease.pk, lease_token=lease.lease_token, outcome="failure",
                                      error="TimeoutError: upstream timed out")


@pytest.fixture
def held_alice(externally_failed_alice) -> Resource:
    """Failed by one external worker, then claimed by another, which holds her now."""
    return resources.services.claim_by_id(resource_id=externally_failed_alice.pk, holder="billing-worker-8")
