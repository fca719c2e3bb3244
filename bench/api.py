"""The REST API under load: gunicorn on loopback, beside the same work done in-process.

    .venv/bin/python bench/api.py [--seconds 8] [--clients 1,4] [--workers 2] [--threads N]

1. GET /api/resources/{id}/retry_history (its first page, 50 entries) of a resource with 10,000
   attempts and 20,000 timeline events: requests per second and p50 / p99 latency as a client
   sees it (target: p99 under 20 ms with one client, under 40 ms with four).
2. POST /api/resources/claim_next then POST .../release (success), one pair after the other:
   pairs per second and p50 / p99 of a pair; beside the same claim_next + release called through
   resources.services in-process, by as many processes, in the same run; the ratio is what HTTP,
   authentication, permissions, throttling, idempotency-free JSON and the audit entries cost.
Each at each client count (closed loop: a client sends its next request when the last answered),
every client a process of its own. gunicorn serves as deployed (deploy/gunicorn.conf.py: its
worker class, connections kept, a JSON access line a request, written to a file beside the
database's name in the temporary folder) with `--workers` and `--threads` (default: the deployed
ones), and the API's throttle on at rates no client reaches (bench/api_settings.py). Runs in a database of its own beside the app's
(`<app>_bench`, see bench/common.py; pools named bench-api-*) and Redis database 14. Prints the
machine's load average before and after: the machine is shared, and the figures say so.
"""

import argparse
import multiprocessing as mp
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from common import add_json_option, figure, gunicorn, percentile, setup_django, write_figures  # noqa: E402

setup_django()

import httpx  # noqa: E402
from django.conf import settings  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.contrib.auth.models import Permission  # noqa: E402
from django.db import connection, connections  # noqa: E402
from django.utils import timezone  # noqa: E402

from audit.models import ApiClient  # noqa: E402
from audit.services import create_api_client, revoke_api_client  # noqa: E402
import resources.services  # noqa: E402
from resources.models import Resource, ResourceEvent, ResourcePool  # noqa: E402
from scheduling.models import Attempt, RetryPolicy, Task  # noqa: E402

BENCH_REDIS_DB = 14
HISTORY_ATTEMPTS = 10_000
CLAIM_POOL_SIZE = 1_000
PERMISSIONS = [("resources", "view_resource"), ("resources", "change_resource"), ("resources", "claim_resource"),
               ("scheduling", "view_attempt")]


def bench_redis_url() -> str:
    url = settings.REDIS_URL
    if url.startswith("unix://"):
        return f"{url.split('?')[0]}?db={BENCH_REDIS_DB}"
    return f"{url.rsplit('/', 1)[0] if url.count('/') > 2 else url}/{BENCH_REDIS_DB}"


def history_resource() -> Resource:
    """The resource with 10,000 attempts (each a claim and a release in its timeline), built once."""
    pool, _ = ResourcePool.objects.get_or_create(name="bench-api-history")
    resource, _ = Resource.objects.get_or_create(pool=pool, key="r-history")
    have = Attempt.objects.filter(resource=resource).count()
    if have >= HISTORY_ATTEMPTS:
        return resource
    print(f"  writing {HISTORY_ATTEMPTS - have:,} attempts and {2 * (HISTORY_ATTEMPTS - have):,} events ...",
          flush=True)
    policy, _ = RetryPolicy.objects.get_or_create(name="default")
    task = Task.objects.create(flow="noop", pool=pool, policy=policy, state="dead", strict=False,
                               idempotency_key=f"bench-api-{time.time_ns()}", created_by="bench",
                               attempt_count=HISTORY_ATTEMPTS, finished_at=timezone.now())
    with connection.cursor() as cursor:
        # Attempt n started n minutes after a start 10,000 minutes ago; odd ones failed.
        cursor.execute(f"""
            INSERT INTO {Attempt._meta.db_table} (task_id, number, resource_id, lease_token, worker, rq_job_id,
                started_at, finished_at, outcome, error_class, error_message, error_signature, category, action,
                duration_ms)
            SELECT %s::bigint, g, %s::bigint, gen_random_uuid(), 'bench', '', now() - make_interval(mins => %s::integer - g),
                now() - make_interval(mins => %s::integer - g) + interval '2 seconds',
                CASE WHEN g %% 2 = 1 THEN 'failed' ELSE 'succeeded' END,
                CASE WHEN g %% 2 = 1 THEN 'TimeoutError' ELSE '' END,
                CASE WHEN g %% 2 = 1 THEN 'read timed out after ' || g || 's' ELSE '' END,
                CASE WHEN g %% 2 = 1 THEN 'TimeoutError: read timed out after <n>s' ELSE '' END,
                CASE WHEN g %% 2 = 1 THEN 'retryable' ELSE '' END, '', 2000
            FROM generate_series(%s::integer, %s::integer) g""",
                       [task.pk, resource.pk, HISTORY_ATTEMPTS, HISTORY_ATTEMPTS, have + 1, HISTORY_ATTEMPTS])
        # Each attempt's claim half a second before it, its release 2.5 s after it started.
        cursor.execute(f"""
            INSERT INTO {ResourceEvent._meta.db_table} (resource_id, kind, actor, reason, category, lease_token,
                details, created_at)
            SELECT a.resource_id,
                CASE WHEN k.n = 1 THEN 'claimed' WHEN a.outcome = 'failed' THEN 'released_failure'
                     ELSE 'released_success' END,
                'task ' || a.task_id,
                CASE WHEN k.n = 2 AND a.outcome = 'failed' THEN a.error_class || ': ' || a.error_message ELSE '' END,
                CASE WHEN k.n = 2 THEN a.category ELSE '' END, a.lease_token, '{{}}'::jsonb,
                a.started_at + make_interval(secs => CASE WHEN k.n = 1 THEN -0.5 ELSE 2.5 END)
            FROM {Attempt._meta.db_table} a CROSS JOIN (VALUES (1), (2)) AS k(n)
            WHERE a.resource_id = %s::bigint AND a.number > %s::integer
            ORDER BY a.id, k.n""", [resource.pk, have])
        cursor.execute(f"ANALYZE {Attempt._meta.db_table}")
        cursor.execute(f"ANALYZE {ResourceEvent._meta.db_table}")
    Resource.objects.filter(pk=resource.pk).update(
        state="failed", failure_count=HISTORY_ATTEMPTS // 2, success_count=HISTORY_ATTEMPTS // 2,
        consecutive_failures=1, last_failure_reason="TimeoutError: read timed out", last_failure_category="retryable")
    return resource


def claim_pool() -> ResourcePool:
    pool, _ = ResourcePool.objects.get_or_create(name="bench-api-claims", defaults={"lease_seconds": 600})
    have = Resource.objects.filter(pool=pool).count()
    if have < CLAIM_POOL_SIZE:
        resources.services.add_resources(pool=pool,
                                         resources=[{"key": f"r{n}"} for n in range(have, CLAIM_POOL_SIZE)])
    # An interrupted run may have left leases behind.
    Resource.objects.filter(pool=pool).exclude(state="available").update(
        state="available", lease_token=None, lease_kind="", lease_holder="", leased_at=None, leased_until=None)
    return pool


def api_key() -> str:
    user, _ = get_user_model().objects.get_or_create(username="bench-api")
    for app_label, codename in PERMISSIONS:
        user.user_permissions.add(Permission.objects.get(content_type__app_label=app_label, codename=codename))
    for client in ApiClient.objects.filter(name="bench", revoked_at__isnull=True):
        revoke_api_client(client=client, actor="bench")
    return create_api_client(name="bench", user=user, actor="bench")[1]


# Each client is a process: a closed loop of one call after the other until the deadline.


def http_history(base: str, key: str, resource_id: int):
    client = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=30)
    path = f"/api/resources/{resource_id}/retry_history"

    def call():
        response = client.get(path)
        assert response.status_code == 200, response.text
    return call


def http_pair(base: str, key: str, pool: str, holder: str):
    client = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=30)

    def call():
        lease = client.post("/api/resources/claim_next", json={"pool": pool, "holder": holder})
        assert lease.status_code == 200, lease.text
        body = lease.json()
        released = client.post(f"/api/resources/{body['id']}/release",
                               json={"lease_token": body["lease_token"], "outcome": "success"})
        assert released.status_code == 200, released.text
    return call


def services_pair(pool_id: int, holder: str):
    def call():
        lease = resources.services.claim_next(pool=pool_id, holder=holder)
        resources.services.release(resource=lease.pk, lease_token=lease.lease_token, outcome="success", actor=holder)
    return call


def client_process(make, args, seconds: float, start, results) -> None:
    connections.close_all()
    call = make(*args)
    for _ in range(20):  # connect and warm up (connections, prepared statements) before the clock
        call()
    start.wait()
    times, deadline = [], time.monotonic() + seconds
    while time.monotonic() < deadline:
        began = time.perf_counter()
        call()
        times.append((time.perf_counter() - began) * 1000)
    results.put(times)


def run(make, args_of, clients: int, seconds: float) -> dict:
    connections.close_all()
    ctx = mp.get_context("fork")
    start, results = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=client_process, args=(make, args_of(n), seconds, start, results))
             for n in range(clients)]
    for proc in procs:
        proc.start()
    time.sleep(2.0)
    start.set()
    times = [t for _ in procs for t in results.get(timeout=seconds + 120)]
    for proc in procs:
        proc.join()
    return {"rate": len(times) / seconds, "p50": statistics.median(times), "p99": percentile(times, 0.99),
            "n": len(times)}


def row(label: str, figures: dict, unit: str) -> str:
    return (f"  {label:34} {figures['rate']:8.0f} {unit}/s   p50 {figures['p50']:6.1f} ms   "
            f"p99 {figures['p99']:6.1f} ms   ({figures['n']:,})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=8.0, help="Length of each timed run.")
    parser.add_argument("--clients", default="1,4", help="Comma-separated client counts (one process each).")
    parser.add_argument("--workers", type=int, default=2, help="gunicorn worker processes.")
    parser.add_argument("--threads", type=int, default=None,
                        help="Threads per gunicorn worker (default: deploy/gunicorn.conf.py's).")
    add_json_option(parser)
    args = parser.parse_args()
    counts = [int(c) for c in args.clients.split(",")]

    print(f"database: PostgreSQL {connection.cursor().connection.info.server_version}, cores: {os.cpu_count()}, "
          f"load average before: {os.getloadavg()[0]:.2f}")
    resource, pool, key = history_resource(), claim_pool(), api_key()
    print(f"resource {resource.pk}: {Attempt.objects.filter(resource=resource).count():,} attempts, "
          f"{ResourceEvent.objects.filter(resource=resource).count():,} events; claims from a pool of "
          f"{CLAIM_POOL_SIZE:,}; gunicorn {args.workers} workers x {args.threads or 'the deployed'} threads")
    env = {**os.environ, "REDIS_URL": bench_redis_url(), "DJANGO_SETTINGS_MODULE": "bench.api_settings"}
    log = open(Path(tempfile.gettempdir()) / f"{connection.settings_dict['NAME']}-api-gunicorn.log", "w")
    server, base = gunicorn(args.workers, args.threads, env, log, deployed=True)
    try:
        for clients in counts:
            print(f"\n{clients} client{'s' if clients > 1 else ''}, {args.seconds:g} s each")
            history = run(http_history, lambda n: (base, key, resource.pk), clients, args.seconds)
            target = f"< {20 if clients == 1 else 40} ms"  # issue 24's targets: one client, several
            print(row("GET retry_history (HTTP)", history, "req") + f"   target p99 {target}")
            http = run(http_pair, lambda n: (base, key, pool.name, f"bench-http-{n}"), clients, args.seconds)
            print(row("claim_next + release (HTTP)", http, "pairs"))
            local = run(services_pair, lambda n: (pool.pk, f"bench-local-{n}"), clients, args.seconds)
            print(row("claim_next + release (services)", local, "pairs"))
            print(f"  {'HTTP / in-process':34} throughput {http['rate'] / local['rate']:.2f}x, "
                  f"p50 {http['p50'] / local['p50']:.1f}x the time")
            figure(f"GET retry_history p99, {clients} client(s)", history["p99"], "ms", target=target)
            figure(f"claim_next + release over HTTP, {clients} client(s)", http["rate"], "pairs/s",
                   baseline=local["rate"], baseline_name="the same through the services in-process")
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()
    write_figures(args.json, seconds=args.seconds, workers=args.workers, threads=args.threads)
    print(f"\nload average after: {os.getloadavg()[0]:.2f} (1 min), {os.getloadavg()[1]:.2f} (5 min)")


if __name__ == "__main__":
    main()
