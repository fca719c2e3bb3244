import pytest

from retryops import devservices

from resources import services
from tests.factories import ResourceFactory, ResourcePoolFactory


@pytest.fixture
def pool(db):
    return ResourcePoolFactory(name="accounts", resource_noun="account")


@pytest.fixture
def alice(pool):
    return ResourceFactory(pool=pool, key="alice@x")


@pytest.fixture
def bob(pool):
    return ResourceFactory(pool=pool, key="bob@x")


@pytest.fixture
def claimed_alice(alice):
    return services.claim_by_id(resource_id=alice.pk, holder="task 812")


def pytest_report_header(config):
    return [f"retryops: {what} from {where}" for what, where in devservices.SOURCES.items()]
