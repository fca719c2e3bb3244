"""Server time and query count of the ops dashboard, with 1,000,000 attempts beside 10,000.

    .venv/bin/python bench/dashboard.py [--sizes 10000,1000000] [--repeat 30] [--days 7]

For each size, a database of its own (`retryops_bench_dash<size>_d<days>` beside the app's
`retryops`, see bench/common.py; built once and kept, `DROP DATABASE` removes it) holds that
many attempts of about two thirds as many tasks, spread evenly over the last `--days` days, with
one resource per ten attempts (100,000 for 1,000,000) in 5 pools. Of the tasks, 60% succeed at
once, 28% after one or two retries, 5% die after three attempts and 3% at their first (not
retryable), 2% wait for a retry (a tenth of them overdue) and 0.2% run now; each attempt's
task events are those the services write (a failure, then a retry scheduled or the task dead; a
retry's success). Every dead task has its dead letter, open if it died in the last two days, and
each flow and error signature one live work order, some past their SLA. So the last 24 hours
hold a `--days`th of the attempts: 143,000 of a million at 7 days.

A superuser then requests the admin index (which holds the dashboard's panel) and the
dashboard's fragment, which the panel fetches every 5 s, through Django's test Client
`--repeat` times after one warm-up request, and it prints the server time per request, p50 and
p95, and the queries per request, each size beside the other (target p95 under 300 ms). The
fragment also reads the RQ queues and workers from the Redis of REDIS_URL (else the local or
embedded one). Each size runs in a child process of its own, because Django holds one database
per process.
"""

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (  # noqa: E402
    page_sizes_in_children,
    print_page_table,
    setup_django,
    superuser_client,
    time_pages,
)

POOLS = 5
TARGET_P95_MS = 300
FLOWS = ("charge", "signup", "refund", "sync")
# Error signatures, one per task shape that fails; the dead ones group into work orders by flow.
SIGNATURES = ("TimeoutError: upstream timed out after <n>s", "HTTPError: <n> Bad Gateway",
              "AccountLocked: account <email> locked", "PermissionError: HTTP <n> forbidden")

PAGES = [("admin index (dashboard panel)", "admin:index"), ("dashboard fragment", "ops_dashboard")]

# One statement per table, all in the database: a Python loop over a million rows would be the
# benchmark's slowest part. random() after setseed() makes every database the same. A task's
# shape comes from its number: g % 100 below 60 succeeds at once; 60-79 after one retry; 80-87
# after two; 88-92 dies after three attempts; 93-95 dies at its first (not retryable); 96-97
# waits for a retry after two failures (every tenth overdue); 98-99 runs its second attempt
# when g % 1000 is 998 or 999, else succeeds at once.
BUILD = """
    INSERT INTO resources_resourcepool (name, description, resource_noun, lease_seconds, consume_on_success, created_at)
    SELECT 'bench-dash-' || p, '', 'account', 300, false, now() FROM generate_series(1, %(pools)s) p;

    INSERT INTO resources_resource (
        pool_id, key, label, attributes, state, lease_token, lease_holder, leased_at, leased_until, lease_kind,
        failure_count, success_count, consecutive_failures, last_failure_reason, last_failure_category,
        last_failure_at, last_success_at, quarantine_reason, quarantined_at, probe_after,
        probation_cooldown_seconds, fencing_token, created_at)
    SELECT p.id, 'r' || g || '@example.com', '', '{}', 'available', NULL, '', NULL, NULL, '',
           0, 0, 0, '', '', NULL, NULL, '', NULL, NULL, 0, 0, now() - interval '60 days'
    FROM generate_series(1, %(resources)s) g JOIN resources_resourcepool p ON p.name = 'bench-dash-' || (g %% %(pools)s + 1);

    INSERT INTO scheduling_retrypolicy (name, description, max_attempts, backoff, initial_delay_seconds, multiplier,
        max_delay_seconds, retryable_error_patterns, non_retryable_error_patterns, same_resource_on_retry,
        deadline_seconds, probation_cooldown_seconds, updated_at)
    VALUES ('bench-dash', '', 3, 'exponential', 120, 2, 3600, '[]', '[]', true, NULL, 1800, now());

    CREATE TEMP TABLE shapes AS
    SELECT g AS id,
           CASE WHEN g %% 100 < 60 THEN 'ok1' WHEN g %% 100 < 80 THEN 'ok2' WHEN g %% 100 < 88 THEN 'ok3'
                WHEN g %% 100 < 93 THEN 'dead3' WHEN g %% 100 < 96 THEN 'dead1' WHEN g %% 100 < 98 THEN 'retrying'
                WHEN g %% 1000 >= 998 THEN 'running' ELSE 'ok1' END AS shape,
           now() - random() * %(days)s * interval '1 day' AS t0,
           (SELECT min(id) FROM resources_resource) + (g::bigint * 7919) %% %(resources)s AS resource_id,
           g %% 4 AS f
    FROM generate_series(1, %(tasks)s) g;
    -- What is pending now happened in the last minutes, whatever the task's number.
    UPDATE shapes SET t0 = now() - interval '10 minutes' + random() * interval '5 minutes'
    WHERE shape IN ('retrying', 'running');

    INSERT INTO scheduling_task (id, flow, pool_id, payload, state, strict, is_probe, policy_id, attempt_count,
        next_run_at, deadline_at, idempotency_key, created_by, created_at, finished_at, held_lease_token,
        rq_job_id, result, last_error, last_error_signature, last_error_category, pinned_resource_id,
        requested_resource_id, resource_id)
    SELECT s.id, (%(flows)s::text[])[s.f + 1], r.pool_id, '{}',
           CASE WHEN s.shape LIKE 'ok%%' THEN 'succeeded' WHEN s.shape LIKE 'dead%%' THEN 'dead' ELSE s.shape END,
           false, false, (SELECT id FROM scheduling_retrypolicy WHERE name = 'bench-dash'),
           CASE s.shape WHEN 'ok1' THEN 1 WHEN 'ok2' THEN 2 WHEN 'ok3' THEN 3 WHEN 'dead3' THEN 3 WHEN 'dead1' THEN 1
                        ELSE 2 END,
           CASE s.shape WHEN 'retrying' THEN now() + CASE WHEN s.id %% 10 = 0 THEN - interval '1 minute'
                                                       ELSE random() * interval '30 minutes' END END,
           NULL, 'bench-' || s.id, 'bench', s.t0,
           CASE WHEN s.shape LIKE 'ok%%' OR s.shape LIKE 'dead%%'
                THEN s.t0 + CASE s.shape WHEN 'ok2' THEN interval '122 seconds' WHEN 'ok3' THEN interval '363 seconds'
                                         WHEN 'dead3' THEN interval '363 seconds' ELSE interval '1 second' END END,
           NULL, '', NULL,
           CASE WHEN s.shape = 'ok1' THEN '' ELSE (%(signatures)s::text[])[s.id / 4 %% 4 + 1] END,
           CASE WHEN s.shape = 'ok1' THEN '' ELSE (%(signatures)s::text[])[s.id / 4 %% 4 + 1] END,
           CASE WHEN s.shape = 'ok1' THEN '' WHEN s.shape = 'dead1' THEN 'non_retryable' ELSE 'retryable' END,
           NULL, NULL, s.resource_id
    FROM shapes s JOIN resources_resource r ON r.id = s.resource_id;

    -- Attempt n of a task starts after the backoffs before it (2, then 4 minutes) and takes a second.
    INSERT INTO scheduling_attempt (task_id, number, resource_id, lease_token, worker, rq_job_id, started_at,
        scheduled_for, finished_at, outcome, error_class, error_message, error_signature, category, action,
        duration_ms)
    SELECT t.id, n, t.resource_id, NULL, 'bench', '', a.started_at, NULL,
           CASE WHEN a.outcome <> 'running' THEN a.started_at + interval '1 second' END,
           a.outcome,
           CASE WHEN a.outcome = 'failed' THEN split_part(t.last_error_signature, ':', 1) ELSE '' END,
           CASE WHEN a.outcome = 'failed' THEN t.last_error_signature ELSE '' END,
           CASE WHEN a.outcome = 'failed' THEN t.last_error_signature ELSE '' END,
           CASE WHEN a.outcome = 'failed' THEN t.last_error_category ELSE '' END,
           CASE WHEN a.outcome <> 'failed' THEN '' WHEN t.last_error_category = 'non_retryable' THEN 'dead_letter'
                ELSE 'retry_same_resource' END,
           CASE WHEN a.outcome <> 'running' THEN 1000 END
    FROM scheduling_task t CROSS JOIN LATERAL generate_series(1, t.attempt_count) n
    CROSS JOIN LATERAL (SELECT
        t.created_at + CASE n WHEN 1 THEN interval '0' WHEN 2 THEN interval '121 seconds'
                              ELSE interval '362 seconds' END AS started_at,
        CASE WHEN t.state = 'running' AND n = t.attempt_count THEN 'running'
             WHEN t.state = 'succeeded' AND n = t.attempt_count THEN 'succeeded' ELSE 'failed' END AS outcome) a;

    -- The events the services write with each attempt's end (scheduling.services.failures, attempts).
    INSERT INTO scheduling_taskevent (task_id, kind, attempt_number, details, created_at)
    SELECT a.task_id, e.kind, a.number, '{}', a.finished_at
    FROM scheduling_attempt a JOIN scheduling_task t ON t.id = a.task_id
    CROSS JOIN LATERAL (VALUES
        (CASE WHEN a.outcome = 'failed' THEN 'task.execution.failed' END),
        (CASE WHEN a.outcome = 'failed' AND t.state = 'dead' AND a.number = t.attempt_count THEN 'task.dead'
              WHEN a.outcome = 'failed' THEN 'task.retry.scheduled'
              WHEN a.outcome = 'succeeded' AND a.number > 1 THEN 'task.retry.succeeded' END)) e(kind)
    WHERE e.kind IS NOT NULL
    ORDER BY a.finished_at;

    -- One work order per flow and signature for the dead letters of the last two days, opened a
    -- minute after the first: a third still open (past the acknowledge SLA), a third acknowledged,
    -- a third in progress; and the closed ones of the days before.
    INSERT INTO compensation_workorder (title, source, flow, error_signature, pool_id, state, assignee, runbook, notes,
        resolution, opened_by, dead_letter_count, first_dead_at, last_dead_at, created_at, acknowledged_at,
        started_at, compensated_at, ended_at, updated_at)
    SELECT t.flow || ': ' || t.last_error_signature, 'dead_letters', t.flow, t.last_error_signature, NULL,
           (ARRAY['open', 'acknowledged', 'in_progress'])[row_number() OVER (ORDER BY t.flow, t.last_error_signature) %% 3 + 1],
           '', '', '', '', 'system', count(*), min(t.finished_at), max(t.finished_at),
           min(t.finished_at) + interval '1 minute',
           CASE WHEN row_number() OVER (ORDER BY t.flow, t.last_error_signature) %% 3 > 0
                THEN min(t.finished_at) + interval '10 minutes' END,
           CASE WHEN row_number() OVER (ORDER BY t.flow, t.last_error_signature) %% 3 = 2
                THEN min(t.finished_at) + interval '20 minutes' END,
           NULL, NULL, now()
    FROM scheduling_task t WHERE t.state = 'dead' AND t.finished_at > now() - interval '2 days'
    GROUP BY t.flow, t.last_error_signature;
    INSERT INTO compensation_workorder (title, source, flow, error_signature, pool_id, state, assignee, runbook, notes,
        resolution, opened_by, dead_letter_count, first_dead_at, last_dead_at, created_at, acknowledged_at,
        started_at, compensated_at, ended_at, updated_at)
    SELECT 'closed ' || d, 'manual', '', '', NULL, 'closed', '', '', '', '', 'bench', 0, NULL, NULL,
           now() - d * interval '1 hour', NULL, NULL, NULL, now() - d * interval '1 hour' + interval '5 minutes', now()
    FROM generate_series(48, 48 + 200) d;

    INSERT INTO compensation_deadletter (task_id, flow, pool_id, resource_id, last_error, error_signature,
        error_category, attempt_count, died_at, state, work_order_id, replay_task_id, replay_count, settled_at,
        created_at, updated_at)
    SELECT t.id, t.flow, t.pool_id, t.resource_id, t.last_error, t.last_error_signature, t.last_error_category,
           t.attempt_count, t.finished_at,
           CASE WHEN t.finished_at > now() - interval '2 days' THEN 'open' ELSE 'resolved' END,
           w.id, NULL, 0, CASE WHEN t.finished_at <= now() - interval '2 days' THEN t.finished_at + interval '1 hour' END,
           t.finished_at, t.finished_at
    FROM scheduling_task t
    LEFT JOIN compensation_workorder w ON w.source = 'dead_letters' AND w.flow = t.flow
         AND w.error_signature = t.last_error_signature AND t.finished_at > now() - interval '2 days'
    WHERE t.state = 'dead';
    UPDATE scheduling_task SET collected_at = finished_at WHERE state = 'dead';
"""
TABLES = ("scheduling_taskevent", "compensation_deadletter", "compensation_workorder",
          "scheduling_attempt", "scheduling_task", "scheduling_retrypolicy", "resources_resourceevent",
          "resources_resource", "resources_resourcepool")


def build(size: int, days: int) -> None:
    from django.db import connection, transaction

    from scheduling.models import Attempt, Task

    tasks = round(size / 1.485)  # attempts per task, on average, of the shapes above
    if Task.objects.count() == tasks:
        return
    print(f"  building {size:,} attempts of {tasks:,} tasks over {days} days ...", flush=True, file=sys.stderr)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"TRUNCATE {', '.join(TABLES)} RESTART IDENTITY CASCADE")
        cursor.execute("SELECT setseed(0.42)")
        params = {"pools": POOLS, "resources": max(size // 10, POOLS), "tasks": tasks, "days": days,
                  "flows": list(FLOWS), "signatures": list(SIGNATURES)}
        # One statement per execute: psycopg binds parameters on the server, one statement at a time.
        for statement in BUILD.split(";\n"):
            if statement.strip():
                cursor.execute(statement, params)
        cursor.execute("SELECT setval(pg_get_serial_sequence('scheduling_task', 'id'), max(id)) FROM scheduling_task")
    with connection.cursor() as cursor:
        for table in TABLES:
            cursor.execute(f"VACUUM ANALYZE {table}")
    have = Attempt.objects.count()
    print(f"  {have:,} attempts", file=sys.stderr)


def measure(repeat: int) -> list[dict]:
    from django.urls import reverse

    return time_pages(superuser_client("bench-dash"), [(label, reverse(name)) for label, name in PAGES], repeat)


def child(size: int, repeat: int, days: int) -> None:
    # Each size in a database of its own: retryops_bench_dash10000_d7, retryops_bench_dash1000000_d7.
    setup_django(suffix=f"_bench_dash{size}_d{days}")
    build(size, days)
    print(json.dumps(measure(repeat)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10000,1000000", help="Comma-separated numbers of attempts.")
    parser.add_argument("--repeat", type=int, default=30, help="Timed requests per page.")
    parser.add_argument("--days", type=int, default=7, choices=range(1, 31), metavar="1..30",
                        help="Days the attempts are spread over (the last 24 hours hold 1/days of them).")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.repeat, args.days)
        return
    sizes = [int(s) for s in args.sizes.split(",")]
    results = page_sizes_in_children(__file__, sizes, ["--repeat", str(args.repeat), "--days", str(args.days)])
    print(f"server time per request (ms) and queries, {args.repeat} requests per page after a warm-up, "
          f"attempts spread over {args.days} days; target p95 < {TARGET_P95_MS} ms")
    print_page_table(results, [label for label, _ in PAGES], "attempts", TARGET_P95_MS)


if __name__ == "__main__":
    main()
