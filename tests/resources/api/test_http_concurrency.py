"""50 external systems claim at once, through real HTTP (gunicorn on loopback), from a pool of 20."""

import threading
from collections import Counter

import httpx
import pytest

from resources.models import Resource, ResourceEvent
from tests.factories import ResourceFactory, ResourcePoolFactory
from tests.http_server import gunicorn

CLAIMERS, RESOURCES = 50, 20


def all_at_once(count: int, send) -> list[httpx.Response]:
    """`send(n)` from `count` threads released together; their responses in thread order."""
    barrier, responses = threading.Barrier(count), [None] * count

    def run(n):
        barrier.wait()
        responses[n] = send(n)

    threads = [threading.Thread(target=run, args=(n,)) for n in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    return responses


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_fifty_concurrent_claims_of_a_pool_of_twenty_give_twenty_distinct_leases_and_thirty_pool_exhausted(
        operator_key):
    pool = ResourcePoolFactory(name="contended")
    ResourceFactory.create_batch(RESOURCES, pool=pool)
    headers = {"Authorization": f"Bearer {operator_key}"}
    with gunicorn() as base:
        responses = all_at_once(CLAIMERS, lambda n: httpx.post(
            f"{base}/api/resources/claim_next", json={"pool": "contended", "holder": f"worker-{n}"},
            headers=headers, timeout=60))
    assert Counter(r.status_code for r in responses) == {200: RESOURCES, 409: CLAIMERS - RESOURCES}
    leases = [r.json() for r in responses if r.status_code == 200]
    assert len({lease["id"] for lease in leases}) == RESOURCES
    assert {r.json()["error"]["code"] for r in responses if r.status_code == 409} == {"pool_exhausted"}
    held = dict(Resource.objects.filter(pool=pool).values_list("pk", "lease_holder"))
    assert held == {lease["id"]: lease["lease_holder"] for lease in leases}
    assert ResourceEvent.objects.filter(resource__pool=pool, kind="claimed").count() == RESOURCES
