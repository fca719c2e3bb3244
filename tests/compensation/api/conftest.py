"""API clients of the compensation endpoints' tests, each allowed what its role grants
(retryops/roles.py): "oncall" operates, "approvals" approves, "reports" views."""

import pytest

from compensation.models import DeadLetter
from compensation.services.dead_letters import collect_dead_letters
from retryops import roles
from tests.api_fixtures import keyed_client
from tests.compensation.conftest import dead_tasks

# What the console's groups grant (retryops/roles.py), as their API clients' service users hold it.
READ = roles.ROLES[roles.VIEWERS]
OPERATE = roles.ROLES[roles.OPERATORS]
APPROVE = roles.ROLES[roles.APPROVERS]


@pytest.fixture
def ops(make_api_client):
    return keyed_client(make_api_client("oncall", *OPERATE)[1])


@pytest.fixture
def approver(make_api_client):
    return keyed_client(make_api_client("approvals", *APPROVE)[1])


@pytest.fixture
def reader(make_api_client):
    return keyed_client(make_api_client("reports", *READ)[1])


@pytest.fixture
def letters(pool, alice, bob, default_policy) -> list[DeadLetter]:
    """Two dead letters of one flow and signature, on alice and on bob, collected onto one work order."""
    for resource in (alice, bob):
        dead_tasks(pool=pool, policy=default_policy, resource=resource)
    collect_dead_letters()
    return list(DeadLetter.objects.order_by("id"))
