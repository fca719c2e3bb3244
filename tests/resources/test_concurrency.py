import json
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from resources.choices import EventKind, ResourceState
from resources.models import Resource, ResourceEvent
from tests import servers
from tests.factories import ResourceFactory, ResourcePoolFactory

PROCESSES = 8
RESOURCES = 20
SECONDS = 3
ROOT = Path(__file__).resolve().parents[2]


def run_claimers(pool, *, env: dict, processes: int = PROCESSES, seconds: float = SECONDS,
                 check: bool = True) -> list[dict]:
    """`processes` OS processes claiming and releasing in `pool` for `seconds` (claim_worker),
    with `env`; the counts each printed, or, unless `check`, {"error": its stderr} for one that failed."""
    workers = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.resources.claim_worker", str(pool.pk), str(seconds), f"worker {n}"],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        for n in range(processes)
    ]
    results = []
    for worker in workers:
        out, err = worker.communicate(timeout=60)
        if not check and worker.returncode:
            results.append({"error": err})
            continue
        assert worker.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    return results


def assert_no_resource_was_shared(pool, results: list[dict], processes: int = PROCESSES) -> None:
    """The claimers really contended, released every claim, and never held a resource together."""
    claims = sum(r["claims"] for r in results)
    assert claims > processes * 10, results  # the processes really did contend
    assert claims == sum(r["releases"] for r in results)

    # The timeline of each resource must alternate claim, release, claim, ... each release
    # carrying the token of the claim just before it: a second holder would break the chain.
    timelines = defaultdict(list)
    for resource_id, kind, token, actor in ResourceEvent.objects.filter(resource__pool=pool).order_by("id").values_list(
        "resource_id", "kind", "lease_token", "actor"
    ):
        timelines[resource_id].append((kind, token, actor))
    for resource_id, events in timelines.items():
        for n, (kind, token, actor) in enumerate(events):
            expected = EventKind.CLAIMED if n % 2 == 0 else EventKind.RELEASED_SUCCESS
            assert kind == expected, f"resource {resource_id}, event {n}: {kind} where {expected} was due"
            if n % 2:
                assert (token, actor) == events[n - 1][1:], f"resource {resource_id}: released by another holder"
    assert sum(len(e) for e in timelines.values()) == 2 * claims
    assert set(Resource.objects.filter(pool=pool).values_list("state", flat=True)) == {ResourceState.AVAILABLE}


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_concurrent_claimers_never_share_a_resource_and_release_every_claim():
    pool = ResourcePoolFactory(name="contended")
    ResourceFactory.create_batch(RESOURCES, pool=pool)

    results = run_claimers(pool, env={**os.environ, "DATABASE_URL": servers.database_url()})

    assert_no_resource_was_shared(pool, results)
