"""Claim + release throughput of the resource pool services, beside a raw-SQL baseline.

    .venv/bin/python bench/claim.py [--seconds 5] [--procs 1,4,16]

Prints, for each number of concurrent processes, claim+release pairs per second through
resources.services (which also write the timeline and the statistics), through a raw
single-statement `UPDATE ... WHERE id = (SELECT ... FOR UPDATE SKIP LOCKED)` loop (the
baseline), and through the naive ORM (`select_for_update(skip_locked=True)` then `save()`),
with the ratios; then checks the timeline for double claims; then the time per claim in a pool
of 1,000,000 resources beside one of 10,000. Runs in a database of its own beside the app's
(`retryops_bench`, see bench/common.py), in pools named bench-*.
"""

import argparse
import multiprocessing as mp
import os
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import add_json_option, figure, setup_django, write_figures  # noqa: E402

setup_django()

from django.db import connection, connections, transaction  # noqa: E402
from django.utils import timezone  # noqa: E402

from resources import services  # noqa: E402
from resources.models import Resource, ResourceEvent, ResourcePool  # noqa: E402

SMALL, LARGE = 10_000, 1_000_000


def ensure_pool(name: str, size: int) -> ResourcePool:
    pool, _ = ResourcePool.objects.get_or_create(name=name, defaults={"lease_seconds": 600})
    have = Resource.objects.filter(pool=pool).count()
    if have < size:
        print(f"  creating {size - have:,} resources in {name} ...", flush=True)
        # INSERT ... SELECT generate_series, with every other column at its model default.
        fields = [f for f in Resource._meta.concrete_fields
                  if f.name not in ("id", "pool", "key") and not f.generated]
        template = Resource(pool=pool)
        values = [f.get_db_prep_save(f.pre_save(template, add=True), connection) for f in fields]
        columns = ", ".join(f.column for f in fields)
        placeholders = ", ".join("%s" for _ in fields)
        with connection.cursor() as cursor:
            cursor.execute(
                f"""INSERT INTO {Resource._meta.db_table} (pool_id, key, {columns})
                    SELECT %s::bigint, 'r' || g, {placeholders} FROM generate_series(%s::bigint, %s::bigint) g""",
                [pool.pk, *values, have + 1, size],
            )
            cursor.execute(f"ANALYZE {Resource._meta.db_table}")
    # A previous run that was interrupted may have left leases behind.
    Resource.objects.filter(pool=pool).exclude(state="available").update(
        state="available", lease_token=None, lease_kind="", lease_holder="", leased_at=None, leased_until=None
    )
    return pool


def services_pair(pool_id: int, holder: str) -> None:
    lease = services.claim_next(pool=pool_id, holder=holder)
    services.release(resource=lease.pk, lease_token=lease.lease_token, outcome="success", actor=holder)


RAW_CLAIM = f"""
    UPDATE {Resource._meta.db_table} SET state = 'in_use', lease_token = %s, lease_kind = 'use', lease_holder = %s,
        leased_at = now(), leased_until = now() + interval '600 seconds'
    WHERE id = (SELECT id FROM {Resource._meta.db_table} WHERE pool_id = %s AND state = 'available'
                LIMIT 1 FOR UPDATE SKIP LOCKED)
    RETURNING id"""
RAW_RELEASE = f"""
    UPDATE {Resource._meta.db_table} SET state = 'available', lease_token = NULL, lease_kind = '', lease_holder = '',
        leased_at = NULL, leased_until = NULL, success_count = success_count + 1
    WHERE id = %s AND lease_token = %s"""


def raw_pair(pool_id: int, holder: str) -> None:
    token = uuid.uuid4()
    with connection.cursor() as cursor:
        cursor.execute(RAW_CLAIM, [token, holder, pool_id])
        row = cursor.fetchone()
        if row is None:
            return
        cursor.execute(RAW_RELEASE, [row[0], token])


def orm_pair(pool_id: int, holder: str) -> None:
    with transaction.atomic():
        resource = (
            Resource.objects.select_for_update(skip_locked=True).filter(pool_id=pool_id, state="available").first()
        )
        if resource is None:
            return
        resource.state, resource.lease_token, resource.lease_holder = "in_use", uuid.uuid4(), holder
        resource.lease_kind = "use"
        resource.leased_at = timezone.now()
        resource.leased_until = resource.leased_at + timezone.timedelta(seconds=600)
        resource.save()
    token = resource.lease_token
    with transaction.atomic():
        resource = Resource.objects.select_for_update().get(pk=resource.pk, lease_token=token)
        resource.state, resource.lease_token, resource.lease_holder, resource.lease_kind = "available", None, "", ""
        resource.leased_at = resource.leased_until = None
        resource.success_count += 1
        resource.save()


PAIRS = {"services": services_pair, "raw SQL": raw_pair, "naive ORM": orm_pair}


def worker(kind: str, pool_id: int, seconds: float, n: int, start, results) -> None:
    connections.close_all()
    pair = PAIRS[kind]
    holder = f"bench {kind} {n}"
    pair(pool_id, holder)  # connect and warm up before the clock starts
    start.wait()
    count, deadline = 0, time.monotonic() + seconds
    while time.monotonic() < deadline:
        pair(pool_id, holder)
        count += 1
    results.put(count)


def throughput(kind: str, pool_id: int, procs: int, seconds: float) -> float:
    connections.close_all()
    ctx = mp.get_context("fork")
    start, results = ctx.Event(), ctx.Queue()
    workers = [ctx.Process(target=worker, args=(kind, pool_id, seconds, n, start, results)) for n in range(procs)]
    for w in workers:
        w.start()
    time.sleep(1.0 + 0.1 * procs)
    start.set()
    total = sum(results.get(timeout=seconds + 120) for _ in workers)
    for w in workers:
        w.join()
    return total / seconds


def double_claims(pool: ResourcePool, since_event_id: int) -> int:
    """Claims of a resource that arrived while another claim on it was still unreleased."""
    doubles, holding = 0, {}
    events = (
        ResourceEvent.objects.filter(resource__pool=pool, id__gt=since_event_id)
        .order_by("id").values_list("resource_id", "kind", "lease_token").iterator(chunk_size=20_000)
    )
    for resource_id, kind, token in events:
        if kind == "claimed":
            doubles += resource_id in holding
            holding[resource_id] = token
        elif holding.get(resource_id) == token:
            del holding[resource_id]
    return doubles


def time_per_claim(pool: ResourcePool, pairs: int) -> float:
    for _ in range(50):
        services_pair(pool.pk, "bench pick")
    began = time.perf_counter()
    for _ in range(pairs):
        services_pair(pool.pk, "bench pick")
    return (time.perf_counter() - began) / pairs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=5.0, help="Length of each throughput run.")
    parser.add_argument("--procs", default="1,4,16", help="Comma-separated process counts.")
    parser.add_argument("--pick-pairs", type=int, default=2000, help="Claims timed in each pool-size run.")
    add_json_option(parser)
    args = parser.parse_args()
    procs = [int(p) for p in args.procs.split(",")]

    print(f"database: PostgreSQL {connection.cursor().connection.info.server_version}, cores: {os.cpu_count()}")
    small = ensure_pool("bench-10k", SMALL)
    first_event = ResourceEvent.objects.order_by("-id").values_list("id", flat=True).first() or 0

    print(f"\nclaim+release pairs/s, pool of {SMALL:,}, {args.seconds:g} s per run")
    print(f"{'procs':>5} {'services':>10} {'raw SQL':>10} {'naive ORM':>10} {'services/raw':>13} {'ORM/raw':>8}")
    for n in procs:
        rates = {kind: throughput(kind, small.pk, n, args.seconds) for kind in PAIRS}
        raw = rates["raw SQL"]
        print(f"{n:>5} {rates['services']:>10.0f} {raw:>10.0f} {rates['naive ORM']:>10.0f} "
              f"{rates['services'] / raw:>13.2f} {rates['naive ORM'] / raw:>8.2f}", flush=True)
        figure(f"claim+release through the services, {n} process(es)", rates["services"], "pairs/s", baseline=raw,
               baseline_name="raw FOR UPDATE SKIP LOCKED loop")

    doubles = double_claims(small, first_event)
    print(f"\ndouble claims in the services' timeline: {doubles}")
    figure("double claims in the services' timeline", doubles, "claims", target="0")

    large = ensure_pool("bench-1m", LARGE)
    t_small = time_per_claim(small, args.pick_pairs)
    t_large = time_per_claim(large, args.pick_pairs)
    print(f"\ntime per claim+release, 1 process, {args.pick_pairs} pairs")
    print(f"  pool of {SMALL:>9,}: {t_small * 1000:.3f} ms (baseline)")
    print(f"  pool of {LARGE:>9,}: {t_large * 1000:.3f} ms  ratio {t_large / t_small:.2f} (target <= 1.5)")
    figure(f"time per claim+release, pool of {LARGE:,}", t_large * 1000, "ms", baseline=t_small * 1000,
           baseline_name=f"pool of {SMALL:,}", target="ratio <= 1.5")
    write_figures(args.json, seconds=args.seconds, procs=procs)


if __name__ == "__main__":
    main()
