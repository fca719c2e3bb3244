"""The policy what-if's time over 1,000,000 recorded attempts, beside 10,000 in the same run.

    .venv/bin/python bench/whatif.py [--sizes 10000,1000000] [--repeat 3]

Per size, a policy of its own (`bench-whatif-<size>`) whose tasks, created over the last 6 days,
have about that many attempts: half succeed at once, a fifth after one timeout, a tenth after two,
a tenth die after three timeouts, 5 percent are banned at once, 5 percent fail twice with an HTTP
503 carrying a request id of its own (texts the verdict memo cannot share) and then succeed. The
what-if replays them under the policy and under a proposal (a fourth attempt, timeouts on another
resource, a deadline), as `manage.py policy_whatif` and the admin's preview do; the best of
`--repeat` runs is printed, with the attempts per second and the ratio of the sizes' times
(target: under 5 s at 1,000,000). The rows are built in SQL once and kept, in a database of its
own beside the app's (`retryops_bench_whatif`, see bench/common.py). bench/metrics.py may call
`time_what_if(policy)` on a policy of its own million attempts, or `measure(sizes)` (which adds
this file's tasks to the database it runs in), and print the rows.
"""

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

TARGET_SECONDS = 5
PROPOSAL = {"max_attempts": 4, "deadline_seconds": 200,
            "retryable_error_patterns": [{"pattern": "timed out", "action": "retry_other_resource"}]}

# (shape, share in percent, steps): "ok" or an error text; {g} is the task's number, {md5} an id.
SHAPES = (
    ("first", 50, ["ok"]),
    ("one timeout", 20, ["TimeoutError: read timed out after {s}s", "ok"]),
    ("two timeouts", 10, ["TimeoutError: read timed out after {s}s"] * 2 + ["ok"]),
    ("dead", 10, ["TimeoutError: read timed out after {s}s"] * 3),
    ("banned", 5, ["PermissionError: account banned"]),
    ("503 twice", 5, ["HTTPError: HTTP 503 for request {md5}"] * 2 + ["ok"]),
)
ATTEMPTS_PER_TASK = sum(share * len(steps) for _shape, share, steps in SHAPES) / 100

BUILD_TASKS = """
    INSERT INTO scheduling_task (flow, pool_id, payload, state, strict, is_probe, policy_id, attempt_count,
        idempotency_key, created_by, created_at, finished_at, rq_job_id, last_error, last_error_signature,
        last_error_category)
    SELECT 'demo', %(pool)s, '{}', CASE WHEN g %% 100 BETWEEN 80 AND 94 THEN 'dead' ELSE 'succeeded' END,
        false, false, %(policy)s, 0, %(policy_name)s || '-' || g, 'bench',
        now() - interval '6 days' + (g::float / %(tasks)s) * interval '6 days',
        now() - interval '6 days' + (g::float / %(tasks)s) * interval '6 days' + interval '10 minutes',
        '', '', '', ''
    FROM generate_series(1, %(tasks)s) g
"""
# A task's shape from its number: 0-49 first, 50-69 one timeout, 70-79 two, 80-89 dead,
# 90-94 banned, 95-99 503 twice (the same cut as SHAPES).
BUILD_ATTEMPTS = """
    WITH t AS (
        SELECT id, created_at, %(first_resource)s + id %% 1000 AS resource,
               split_part(idempotency_key, '-', 4)::int %% 100 AS shape,
               split_part(idempotency_key, '-', 4)::int %% 60 AS s
        FROM scheduling_task WHERE policy_id = %(policy)s
    ), steps AS (
        SELECT t.*, n, CASE
            WHEN shape < 50 THEN 1 WHEN shape < 70 THEN 2 WHEN shape < 80 THEN 3 WHEN shape < 90 THEN 3
            WHEN shape < 95 THEN 1 ELSE 3 END AS count
        FROM t, generate_series(1, 3) n
    )
    INSERT INTO scheduling_attempt (task_id, number, resource_id, worker, rq_job_id, started_at, scheduled_for,
        finished_at, outcome, error_class, error_message, error_signature, category, action, duration_ms)
    SELECT id, n, resource, 'bench', '',
        created_at + (n - 1) * interval '61 seconds', created_at + (n - 1) * interval '61 seconds',
        created_at + (n - 1) * interval '61 seconds' + interval '1 second',
        CASE WHEN n = count AND (shape < 80 OR shape >= 95) THEN 'succeeded' ELSE 'failed' END,
        e.class, e.message, e.signature, e.category, e.action, 1000
    FROM steps, LATERAL (SELECT * FROM (VALUES
        ((shape < 80 OR shape >= 95) AND n = count, '', '', '', '', ''),
        (shape BETWEEN 90 AND 94, 'PermissionError', 'account banned', 'PermissionError: account banned',
         'non_retryable', 'quarantine'),
        (shape >= 95, 'HTTPError', 'HTTP 503 for request ' || md5(id::text || n),
         'HTTPError: HTTP <n> for request <id>', 'retryable', 'retry_same_resource'),
        (true, 'TimeoutError', 'read timed out after ' || s || 's', 'TimeoutError: read timed out after <n>s',
         'retryable', 'retry_same_resource')
    ) AS v(hit, class, message, signature, category, action) WHERE hit LIMIT 1) e
    WHERE n <= count
"""


def build(size: int) -> str:
    """The policy `bench-whatif-<size>` with about `size` attempts, built once."""
    from django.db import connection, transaction

    from resources.models import Resource, ResourcePool
    from scheduling.models import Attempt, RetryPolicy, Task

    name = f"bench-whatif-{size}"
    policy, _ = RetryPolicy.objects.get_or_create(name=name, defaults={
        "max_attempts": 3, "backoff": "fixed", "initial_delay_seconds": 60, "max_delay_seconds": 60,
        "retryable_error_patterns": [{"pattern": "timed out", "action": "retry_same_resource", "probation": False}],
        "non_retryable_error_patterns": [{"pattern": "banned", "action": "quarantine", "probation": False}]})
    if Attempt.objects.filter(task__policy=policy).exists():
        return name
    tasks = round(size / ATTEMPTS_PER_TASK)
    print(f"  building {tasks:,} tasks with about {size:,} attempts ...", file=sys.stderr, flush=True)
    pool, _ = ResourcePool.objects.get_or_create(name="bench-whatif")
    if not Resource.objects.filter(pool=pool).exists():
        Resource.objects.bulk_create(Resource(pool=pool, key=f"r{n}@example.com") for n in range(1000))
    ids = sorted(Resource.objects.filter(pool=pool).values_list("pk", flat=True))
    assert ids == list(range(ids[0], ids[0] + 1000)), "the bench pool's resources are not 1,000 consecutive ids"
    with transaction.atomic(), connection.cursor() as cursor:
        Task.objects.filter(policy=policy).delete()
        cursor.execute(BUILD_TASKS, {"pool": pool.pk, "policy": policy.pk, "policy_name": name, "tasks": tasks})
        cursor.execute(BUILD_ATTEMPTS, {"policy": policy.pk, "first_resource": ids[0]})
        cursor.execute("""UPDATE scheduling_task t SET attempt_count = a.n FROM (
            SELECT task_id, max(number) AS n FROM scheduling_attempt GROUP BY task_id) a
            WHERE a.task_id = t.id AND t.policy_id = %s""", [policy.pk])
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE scheduling_task")
        cursor.execute("VACUUM ANALYZE scheduling_attempt")
    return name


def time_what_if(policy: str, changes: dict | None = None, repeat: int = 3) -> dict:
    """The what-if of an existing policy (its tasks as they are, e.g. bench/metrics.py's) under
    `changes` (PROPOSAL by default): {"attempts", "tasks", "seconds", "python_cpu_seconds"} of the
    best of `repeat` runs, and the last "result". Django must be set up on a benchmark database."""
    from scheduling.models import Attempt, RetryPolicy
    from scheduling.whatif import proposal, what_if

    current = RetryPolicy.objects.get(name=policy)
    proposed = proposal(current, PROPOSAL if changes is None else changes)
    times = []
    for _ in range(repeat):
        started, cpu = time.perf_counter(), time.process_time()
        result = what_if(policy=policy, proposed=proposed)
        times.append((time.perf_counter() - started, time.process_time() - cpu))
    best = min(times)
    return {"attempts": Attempt.objects.filter(task__policy=current).count(), "tasks": result.tasks,
            "seconds": best[0], "python_cpu_seconds": best[1], "result": result}


def measure(sizes=(10_000, 1_000_000), repeat: int = 3) -> list[dict]:
    """Per size, the policy `bench-whatif-<size>` built (once) and timed by time_what_if, with its
    "size". Adds about sum(sizes) attempts to the database it runs in."""
    return [{"size": size, **time_what_if(build(size), repeat=repeat)} for size in sizes]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10000,1000000", help="Attempts per policy, comma-separated.")
    parser.add_argument("--repeat", type=int, default=3)
    from common import add_json_option, figure, setup_django, write_figures

    add_json_option(parser)
    args = parser.parse_args()

    setup_django(suffix="_bench_whatif")
    load = os.getloadavg()[0]
    rows = measure([int(size) for size in args.sizes.split(",")], args.repeat)
    print(f"{os.cpu_count()} cores, load average {load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end")
    print(f"{'attempts':>10} {'tasks':>9} {'what-if s':>10} {'Python CPU s':>13} {'attempts/s':>12}")
    for row in rows:
        print(f"{row['attempts']:>10,} {row['tasks']:>9,} {row['seconds']:>10.2f} {row['python_cpu_seconds']:>13.2f} "
              f"{row['attempts'] / row['seconds']:>12,.0f}")
    if len(rows) > 1:
        first, last = rows[0], rows[-1]
        print(f"ratio {last['seconds'] / first['seconds']:.0f}x the time for {last['attempts'] / first['attempts']:.0f}x "
              f"the attempts; {last['attempts']:,} attempts in {last['seconds']:.2f} s (target < {TARGET_SECONDS} s)")
        figure(f"policy what-if over {last['attempts']:,} attempts", last["seconds"], "s",
               baseline=first["seconds"], baseline_name=f"{first['attempts']:,} attempts",
               target=f"< {TARGET_SECONDS} s")
    for row in rows[-1:]:
        print(f"  {'at ' + format(row['attempts'], ',') + ' attempts':<50} {'current':>12} {'proposed':>12}")
        for line in row["result"].rows():
            print(f"  {line.label:<50} {line.current.total:>12,.1f} {line.proposed.total:>12,.1f}")
    write_figures(args.json, sizes=args.sizes, repeat=args.repeat)


if __name__ == "__main__":
    main()
