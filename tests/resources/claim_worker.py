"""A separate OS process that claims and releases resources for a while (see test_concurrency).

Usage: python -m tests.resources.claim_worker POOL_ID SECONDS NAME; prints its counts as JSON.
"""

import json
import os
import random
import sys
import time


def main(pool_id: int, seconds: float, name: str) -> dict:
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "retryops.settings")
    django.setup()
    from resources import services
    from resources.errors import PoolExhausted, ResourceUnavailable
    from resources.models import Resource

    ids = list(Resource.objects.filter(pool_id=pool_id).values_list("id", flat=True))
    counts = {"claims": 0, "releases": 0, "exhausted": 0, "unavailable": 0}
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if random.random() < 0.3:
                lease = services.claim_by_id(resource_id=random.choice(ids), holder=name)
            else:
                lease = services.claim_next(pool=pool_id, holder=name)
        except PoolExhausted:
            counts["exhausted"] += 1
            continue
        except ResourceUnavailable:
            counts["unavailable"] += 1
            continue
        counts["claims"] += 1
        time.sleep(random.random() * 0.002)  # hold it a little, as a flow would
        services.release(resource=lease.pk, lease_token=lease.lease_token, outcome="success", actor=name)
        counts["releases"] += 1
    return counts


if __name__ == "__main__":
    print(json.dumps(main(int(sys.argv[1]), float(sys.argv[2]), sys.argv[3])))
