"""The invariant checker (`manage.py check_invariants`) at 1,000,000 attempts, beside 1,000.

    .venv/bin/python bench/invariants.py [--sizes 1000,1000000] [--repeat 20]

It runs every minute (issue 12), so the whole fast run's target is p95 < 1 s at 1,000,000
attempts, and each fast check's about 200 ms. Each size has a database of its own
(`retryops_bench_invariants<size>` beside the app's; built once and kept, `DROP DATABASE`
removes it) holding bench/dashboard.py's history (that many attempts of two thirds as many tasks
over 7 days, their task events, dead letters and work orders, one resource per ten attempts),
to which ENRICH adds what the checks read, as the services would have left it: the running
tasks' resources leased to them and every other retrying task holding its resource for its
retry, a resource in a thousand claimed through the API, one waiting task in fifty overdue
with an RQ job gone from Redis (reported, after a pipelined read of Redis), a fifth of the open
dead letters discarded, the audit rows of every settled dead letter and moved work order among
half as many API claim entries as attempts, and the resource timeline the counters agree with
(one event per finished attempt).

Each fast check and the whole fast run (check_invariants(), what the command runs before it
prints) are timed `--repeat` times after a warm-up, p50 and p95 with their queries; `--deep` (the
counters' full scan of the timeline, and dead letters back to their retention) once. The clock
is the moment ENRICH ran (kept in the database), so a database built days ago is checked as it
was built. Each size runs in a child process of its own, because Django holds one database per
process. The overdue check reads the Redis of REDIS_URL (else the local or embedded one).
"""

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (  # noqa: E402
    figure,
    print_page_table,
    setup_django,
    sizes_in_children,
    timed,
    write_figures,
)

TARGET_RUN_MS = 1000  # it runs every minute
TARGET_CHECK_MS = 200
DAYS = 7
# One statement at a time (psycopg binds on the server); random() after setseed() makes every
# database the same. The moment it ran is kept in bench_invariants_as_of: the checks' clock.
ENRICH = """
    DROP TABLE IF EXISTS bench_invariants_as_of;
    CREATE TABLE bench_invariants_as_of AS SELECT now() AS at;

    -- The running tasks run on a resource of their own each, leased to them (the lease their
    -- running attempt carries); every other retrying task holds its resource for the retry.
    CREATE TEMP TABLE leased AS
    SELECT t.id AS task_id, t.state, (SELECT min(id) FROM resources_resource) + row_number() OVER (ORDER BY t.id) - 1
           AS resource_id, gen_random_uuid() AS token
    FROM scheduling_task t WHERE t.state = 'running' OR (t.state = 'retrying' AND t.id %% 2 = 0);
    UPDATE scheduling_task t SET resource_id = l.resource_id, pool_id = r.pool_id,
           held_lease_token = CASE WHEN l.state = 'retrying' THEN l.token END
    FROM leased l JOIN resources_resource r ON r.id = l.resource_id WHERE t.id = l.task_id;
    UPDATE scheduling_attempt a SET resource_id = l.resource_id, lease_token = l.token
    FROM leased l WHERE a.task_id = l.task_id AND a.outcome = 'running';
    UPDATE resources_resource r SET state = 'in_use', lease_token = l.token, lease_holder = 'task ' || l.task_id,
           leased_at = now() - interval '5 minutes', leased_until = now() + interval '1 hour',
           lease_kind = CASE WHEN l.state = 'running' THEN 'use' ELSE 'hold' END
    FROM leased l WHERE r.id = l.resource_id;
    UPDATE resources_resource SET state = 'in_use', lease_token = gen_random_uuid(), lease_holder = 'billing-sync',
           leased_at = now() - interval '1 minute', leased_until = now() + interval '4 minutes', lease_kind = 'use'
    WHERE state = 'available' AND id %% 1000 = 7;

    -- Waiting tasks due from now on, each with its RQ job; one in fifty overdue, its job gone.
    UPDATE scheduling_task SET rq_job_id = 'bench-inv-' || id,
           next_run_at = CASE WHEN id / 100 %% 50 = 0 THEN now() - interval '10 minutes'
                              ELSE now() + random() * interval '30 minutes' END
    WHERE state IN ('pending', 'scheduled', 'retrying');

    -- An operator discarded a fifth of the open dead letters.
    UPDATE compensation_deadletter SET state = 'discarded', settled_at = died_at + interval '30 minutes'
    WHERE state = 'open' AND id %% 5 = 0;

    -- The audit rows: API claims (half as many as attempts, on resources), then every settled dead
    -- letter's and every manual or moved work order's entries.
    INSERT INTO audit_auditentry (created_at, actor, channel, action, target_type, target_id, target_label, before,
        after, reason, request_id, repairs)
    SELECT now() - random() * %(days)s * interval '1 day', 'api:billing-sync', 'api',
           (ARRAY['resource.claim', 'resource.heartbeat', 'resource.release'])[g %% 3 + 1], 'resources.resource',
           ((SELECT min(id) FROM resources_resource) + g %% %(resources)s)::text, '', NULL, NULL, '', '', '[]'
    FROM generate_series(1, %(claims)s) g;
    INSERT INTO audit_auditentry (created_at, actor, channel, action, target_type, target_id, target_label, before,
        after, reason, request_id, repairs)
    SELECT d.settled_at, 'ops:carol', 'admin',
           CASE d.state WHEN 'discarded' THEN 'dead_letter.discard' ELSE 'dead_letter.resolve' END,
           'compensation.deadletter', d.id::text, '', NULL, NULL, '', '', '[]'
    FROM compensation_deadletter d WHERE d.state <> 'open';
    INSERT INTO audit_auditentry (created_at, actor, channel, action, target_type, target_id, target_label, before,
        after, reason, request_id, repairs)
    SELECT w.created_at, 'ops:carol', 'admin', a.action, 'compensation.workorder', w.id::text, '', NULL, NULL, '', '',
           '[]'
    FROM compensation_workorder w CROSS JOIN LATERAL (VALUES
        (CASE WHEN w.source = 'manual' THEN 'work_order.open' END),
        (CASE WHEN w.state <> 'open' THEN 'work_order.transition' END)) a(action)
    WHERE a.action IS NOT NULL;

    -- The resource timeline the counters agree with: each finished attempt's release.
    INSERT INTO resources_resourceevent (resource_id, kind, actor, reason, category, lease_token, details, created_at)
    SELECT a.resource_id, CASE a.outcome WHEN 'succeeded' THEN 'released_success' ELSE 'released_failure' END,
           'task ' || a.task_id, '', a.category, NULL, '{}', a.finished_at
    FROM scheduling_attempt a WHERE a.outcome <> 'running' AND a.resource_id IS NOT NULL ORDER BY a.finished_at;
    UPDATE resources_resource r SET success_count = e.successes, failure_count = e.failures
    FROM (SELECT resource_id, count(*) FILTER (WHERE kind = 'released_success') AS successes,
                 count(*) FILTER (WHERE kind = 'released_failure') AS failures
          FROM resources_resourceevent GROUP BY resource_id) e
    WHERE r.id = e.resource_id
"""
ENRICHED = ("resources_resource", "resources_resourceevent", "scheduling_task", "scheduling_attempt",
            "compensation_deadletter", "audit_auditentry")


def enrich(size: int) -> None:
    """ENRICH, once per build: bench/dashboard.py's build leaves no resource in use."""
    from django.db import connection, transaction

    from resources.models import Resource

    if Resource.objects.filter(state="in_use").exists():
        return
    print(f"  enriching {size:,} attempts for the checks ...", flush=True, file=sys.stderr)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT setseed(0.17)")
        params = {"days": DAYS, "claims": size // 2, "resources": max(size // 10, 5)}
        for statement in ENRICH.split(";\n"):
            if statement.strip():
                cursor.execute(statement, params)
    with connection.cursor() as cursor:
        for table in ENRICHED:
            cursor.execute(f"VACUUM ANALYZE {table}")


def measure(repeat: int) -> list[dict]:
    from django.db import connection

    from telemetry.health.invariants import CHECKS, DEEP, Horizons, check_invariants

    with connection.cursor() as cursor:
        cursor.execute("SELECT at FROM bench_invariants_as_of")
        (as_of,) = cursor.fetchone()
    horizons = Horizons.from_settings(now=as_of)
    found = {r.name: r.count for r in check_invariants(now=as_of, deep=True)}
    print(f"  violations found: {found}", file=sys.stderr)
    rows = [timed(name, lambda check=check: check(horizons), repeat) for name, check in CHECKS.items()
            if name not in DEEP]
    rows.append(timed("whole fast run", lambda: check_invariants(now=as_of), repeat))
    rows.append(timed("--deep run (once)", lambda: check_invariants(now=as_of, deep=True), 1))
    return rows


def child(size: int, repeat: int) -> None:
    setup_django(suffix=f"_bench_invariants{size}")
    from dashboard import build
    build(size, DAYS)
    enrich(size)
    print(json.dumps(measure(repeat)))


def main() -> None:
    load = os.getloadavg()
    args, sizes, results = sizes_in_children(__file__, __doc__, child, repeat=20,
                                             repeat_help="Timed runs of each check and of the whole fast run.")
    checks = [label for label in results[sizes[-1]] if label not in ("whole fast run", "--deep run (once)")]
    print(f"check_invariants, time per run (ms) and queries, {args.repeat} runs after a warm-up; load average "
          f"{load[0]:.1f} at the start, {os.getloadavg()[0]:.1f} at the end")
    print_page_table(results, checks, "attempts", TARGET_CHECK_MS)
    print_page_table(results, ["whole fast run"], "attempts", TARGET_RUN_MS)
    small, large = sizes[0], sizes[-1]
    deep = {size: results[size]["--deep run (once)"]["p50"] for size in sizes}
    print("--deep run, once: " + ", ".join(f"{deep[size]:.0f} ms at {size:,} attempts" for size in sizes))
    figure(f"--deep run (counters' full scan), once, at {large:,} attempts", deep[large], "ms", baseline=deep[small],
           baseline_name=f"{small:,} attempts")
    write_figures(args.json, sizes=sizes, repeat=args.repeat, load=load)


if __name__ == "__main__":
    main()
