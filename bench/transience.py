"""Which errors are really transient, timed at 1,000,000 attempts beside 10,000.

    .venv/bin/python bench/transience.py [--sizes 10000,1000000] [--repeat 10] [--history-days 30] [--explain]

For each size, a database of its own (`retryops_bench_transience<size>` beside the app's
`retryops`, see bench/common.py; built once and kept, `DROP DATABASE` removes it) holds that many
attempts (2.28 a task) of tasks spread evenly over the last 30 days (`--history-days`), under 3 policies, with 200
error signatures (a fifth of them never recover, a seventh quarantine at once, a third of the
retries move to another resource). It times scheduling.analysis.transient_errors over 7 days (every
policy, one policy) and 30 days, then the console's pages (the page of every policy, a policy's
page, its change page with the section, and the attempts and dead tasks behind the top row)
through Django's test Client, p50 and p95 after a warm-up; then the 7-day counts again from every
failure of the window (failure_counts(rolled_up=False), what the report read before the rollup),
the baseline the rollup is measured against. Before timing, it runs the failure rollup's pass as the
ops process would (the first pass counts every kept hour; its time is reported too), once every
transaction on the server that began before it has ended. `--explain` prints EXPLAIN ANALYZE of
the 7-day read through the rollup to stderr.

The selector's cost follows the failures in its window, so each size also reports how many it read
(7 and 30 days, every policy): the default shape fails 3 attempts in 4 and puts 7/30 of them in the
7-day window (181,000 at 1,000,000 attempts); `--history-days 365` spreads them over a year
(15,000 in 7 days).
"""

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (  # noqa: E402
    add_json_option,
    figure,
    first_rollup_pass,
    page_sizes_in_children,
    print_page_table,
    setup_django,
    superuser_client,
    time_pages,
    write_figures,
)

TARGET_P95_MS = 300
BASELINE = "selector, 7 days, counted from the attempts"
FIRST_PASS = "rollup, first pass"  # not a page: the seconds of the pass that counts every kept hour
FAILURES = "failures in the window"  # not a timed row: the count each size's selector reads
WINDOWS = {"7 days": 7, "30 days": 30}
SIGNATURES = 200

BUILD_POOLS = """
    INSERT INTO resources_resourcepool (name, description, resource_noun, lease_seconds, consume_on_success, created_at)
    SELECT 'bench-transience-' || p, '', 'account', 300, false, now() FROM generate_series(1, 5) p
"""
BUILD_RESOURCES = """
    INSERT INTO resources_resource (
        pool_id, key, label, attributes, state, lease_token, lease_holder, leased_at, leased_until, lease_kind,
        failure_count, success_count, consecutive_failures, last_failure_reason, last_failure_category,
        last_failure_at, last_success_at, quarantine_reason, quarantined_at, probe_after,
        probation_cooldown_seconds, fencing_token, created_at)
    SELECT p.id, 'r' || g || '@example.com', '', '{}', 'available', NULL, '', NULL, NULL, '', 0, 0, 0, '', '',
           NULL, NULL, '', NULL, NULL, 0, 0, now() - interval '60 days'
    FROM generate_series(1, %(resources)s) g
    JOIN resources_resourcepool p ON p.name = 'bench-transience-' || (g %% 5 + 1)
"""
# Task g: signature s = g*31 mod 200; attempts 1 + g*7 mod 4 (one where s quarantines at once);
# it succeeds at its last attempt unless s never recovers (s mod 5 = 0) or g mod 10 >= 8.
BUILD_TASKS = """
    WITH shape AS (
        SELECT g, (g * 31) %% %(signatures)s AS s,
               now() - interval '1 day' * %(history_days)s * (1 - g::float / %(tasks)s) AS created
        FROM generate_series(1, %(tasks)s) g
    ), task AS (
        SELECT g, s, created,
               CASE WHEN s %% 7 = 0 THEN 1 ELSE 1 + (g * 7) %% 4 END AS attempts,
               s %% 7 <> 0 AND s %% 5 <> 0 AND g %% 10 < 8 AS succeeds
        FROM shape
    )
    INSERT INTO scheduling_task (
        flow, pool_id, payload, state, strict, is_probe, policy_id, attempt_count, next_run_at, deadline_at,
        idempotency_key, created_by, created_at, finished_at, resource_id, rq_job_id, last_error,
        last_error_signature, last_error_category)
    SELECT 'demo', (SELECT min(id) FROM resources_resourcepool) + g %% 5, '{}',
           CASE WHEN succeeds THEN 'succeeded' ELSE 'dead' END, false, false,
           (%(policies)s::bigint[])[g %% 3 + 1], attempts, created + attempts * interval '2 minutes', NULL,
           'bench-' || g, 'bench', created, created + attempts * interval '2 minutes',
           -- the resource of its last attempt (BUILD_ATTEMPTS)
           (SELECT min(id) FROM resources_resource)
           + CASE WHEN attempts %% 2 = 0 AND s %% 3 = 0 THEN (g + 1) %% %(resources)s ELSE g %% %(resources)s END,
           '', '', '', ''
    FROM task ORDER BY g
"""
BUILD_ATTEMPTS = """
    WITH a AS (
        SELECT t.id AS task_id, n, t.attempt_count, t.state, t.created_at,
               ((t.id - first.id + 1) * 31) %% %(signatures)s AS s,
               r.id + CASE WHEN n %% 2 = 0 AND ((t.id - first.id + 1) * 31) %% %(signatures)s %% 3 = 0
                           THEN (t.id - first.id + 2) %% %(resources)s ELSE (t.id - first.id + 1) %% %(resources)s
                           END AS resource_id
        FROM scheduling_task t, (SELECT min(id) AS id FROM scheduling_task) first,
             (SELECT min(id) AS id FROM resources_resource) r, generate_series(1, t.attempt_count) n
    )
    INSERT INTO scheduling_attempt (
        task_id, number, resource_id, lease_token, worker, rq_job_id, started_at, scheduled_for, finished_at,
        outcome, error_class, error_message, error_signature, category, action, duration_ms)
    SELECT task_id, n, resource_id, NULL, 'bench', '', created_at + (n - 1) * interval '2 minutes', created_at + (n - 1) * interval '2 minutes',
           created_at + (n - 1) * interval '2 minutes' + interval '1 second',
           CASE WHEN failed THEN 'failed' ELSE 'succeeded' END,
           CASE WHEN failed THEN 'UpstreamError' || s ELSE '' END,
           CASE WHEN failed THEN CASE WHEN s %% 7 = 0 THEN 'account banned after ' ELSE 'request failed after ' END
                                 || n || 's' ELSE '' END,
           CASE WHEN failed THEN 'UpstreamError' || s || CASE WHEN s %% 7 = 0 THEN ': account banned after <n>s'
                                 ELSE ': request failed after <n>s' END ELSE '' END,
           CASE WHEN failed THEN CASE WHEN s %% 7 = 0 THEN 'non_retryable' ELSE 'retryable' END ELSE '' END,
           CASE WHEN failed THEN CASE WHEN s %% 7 = 0 THEN 'quarantine' ELSE 'retry_same_resource' END ELSE '' END,
           1000
    FROM (SELECT *, NOT (n = attempt_count AND state = 'succeeded') AS failed FROM a) a
    ORDER BY task_id, n
"""


def build(size: int, history_days: int) -> None:
    from django.db import connection, transaction

    from resources.models import Resource
    from scheduling.models import Attempt, RetryPolicy, Task

    # 2.28 attempts a task on average (1 to 4, 1 where the signature quarantines at once).
    tasks, resources = size * 100 // 228, max(size // 100, 100)
    if Task.objects.count() == tasks:
        return
    print(f"  building {tasks:,} tasks with {size:,} attempts ...", flush=True, file=sys.stderr)
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("TRUNCATE scheduling_attempt, scheduling_taskevent, scheduling_task, resources_resourceevent, "
                           "resources_resource, resources_resourcepool, scheduling_retrypolicy RESTART IDENTITY CASCADE")
            cursor.execute(BUILD_POOLS)
            cursor.execute(BUILD_RESOURCES, {"resources": resources})
        policies = [RetryPolicy.objects.create(
            name=name, max_attempts=4, initial_delay_seconds=120, max_delay_seconds=600,
            retryable_error_patterns=[{"pattern": "request failed", "action": "retry_same_resource",
                                       "probation": False}],
            non_retryable_error_patterns=[{"pattern": "account banned", "action": "quarantine", "probation": False}])
            for name in ("default", "fast", "patient")]
        with connection.cursor() as cursor:
            cursor.execute(BUILD_TASKS, {"tasks": tasks, "signatures": SIGNATURES, "resources": resources,
                                         "history_days": history_days,
                                         "policies": [p.pk for p in policies]})
            cursor.execute(BUILD_ATTEMPTS, {"signatures": SIGNATURES, "resources": resources})
    with connection.cursor() as cursor:
        for table in (Task._meta.db_table, Attempt._meta.db_table, Resource._meta.db_table):
            cursor.execute(f"VACUUM ANALYZE {table}")


def _time(call, repeat: int) -> dict:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as warm_up:
        call()
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        call()
        times.append((time.perf_counter() - started) * 1000)
    times.sort()
    return {"p50": statistics.median(times), "p95": times[max(0, round(0.95 * len(times)) - 1)], "queries": len(warm_up.captured_queries)}


def measure(size: int, repeat: int, explain: bool) -> list[dict]:
    from django.db import connection
    from django.urls import reverse

    from scheduling import analysis
    from scheduling.models import RetryPolicy

    policy = RetryPolicy.objects.get(name="default")
    rows = [
        {"page": "selector, 7 days, every policy", **_time(lambda: analysis.transient_errors(days=7), repeat)},
        {"page": "selector, 7 days, one policy", **_time(lambda: analysis.transient_errors(policy=policy, days=7),
                                                         repeat)},
        {"page": "selector, 30 days, every policy", **_time(lambda: analysis.transient_errors(days=30), repeat)},
    ]
    if explain:
        from django.test.utils import CaptureQueriesContext

        with CaptureQueriesContext(connection) as captured:
            analysis.transient_errors(days=7)
        read = max(captured.captured_queries, key=lambda query: len(query["sql"]))["sql"]
        with connection.cursor() as cursor:
            cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + read)
            print(f"EXPLAIN ANALYZE at {size:,} attempts, 7 days, every policy:", file=sys.stderr)
            print("\n".join(line for (line,) in cursor.fetchall()), file=sys.stderr)
    client = superuser_client("bench-transience")
    top = analysis.transient_errors(policy=policy, days=7).rows[0]
    behind = f"signature={top.signature}&failed_within_days=7&policy={policy.pk}"
    rows += time_pages(client, [
        ("page, every policy", reverse("admin:scheduling_retrypolicy_transience")),
        ("page, one policy", reverse("admin:scheduling_retrypolicy_transience_of", args=[policy.pk])),
        ("policy change page", reverse("admin:scheduling_retrypolicy_change", args=[policy.pk])),
        ("attempts behind a row", reverse("admin:scheduling_attempt_changelist") + "?" + behind),
        ("dead tasks behind a row", reverse("admin:scheduling_task_changelist") + "?" + behind + "&state__exact=dead"),
    ], repeat)
    # The baseline: the same 7-day counts from every failure of the window.
    def raw():
        until = analysis.timezone.now()
        analysis.failure_counts(since=until - analysis.timedelta(days=7), until=until, limit=analysis.DEFAULT_LIMIT + 1,
                                rolled_up=False)

    rows.append({"page": BASELINE, **_time(raw, max(3, repeat // 3))})
    return rows


def failures_in_windows() -> dict:
    """The failures the selector reads in each of WINDOWS, counted as it counts them."""
    from datetime import timedelta

    from django.utils import timezone

    from scheduling.choices import AttemptOutcome
    from scheduling.models import Attempt

    now = timezone.now()
    failures = Attempt.objects.filter(outcome__in=[AttemptOutcome.FAILED, AttemptOutcome.ABANDONED],
                                      task__is_probe=False, started_at__lt=now)
    return {window: failures.filter(started_at__gte=now - timedelta(days=days)).count()
            for window, days in WINDOWS.items()}


def child(size: int, repeat: int, explain: bool, history_days: int) -> None:
    # A database per size and history: retryops_bench_transience1000000 (30 days), ..._h365.
    setup_django(suffix=f"_bench_transience{size}" + (f"_h{history_days}" if history_days != 30 else ""))
    build(size, history_days)
    first_pass = {"page": FIRST_PASS, **first_rollup_pass()}
    print(json.dumps([*measure(size, repeat, explain), first_pass, {"page": FAILURES, **failures_in_windows()}]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10000,1000000", help="Comma-separated numbers of attempts.")
    parser.add_argument("--repeat", type=int, default=10, help="Timed calls or requests of each.")
    parser.add_argument("--explain", action="store_true", help="EXPLAIN ANALYZE the 7-day aggregate (stderr).")
    parser.add_argument("--history-days", type=int, default=30,
                        help="Days the attempts are spread over (the windows read 7 and 30 of them).")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    add_json_option(parser)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.repeat, args.explain, args.history_days)
        return
    sizes = [int(s) for s in args.sizes.split(",")]
    results = page_sizes_in_children(__file__, sizes, ["--repeat", str(args.repeat), "--history-days",
                                                       str(args.history_days), *["--explain"] * args.explain])
    labels = [label for label in next(iter(results.values())) if label not in (BASELINE, FAILURES, FIRST_PASS)]
    print(f"which errors are really transient, attempts spread over {args.history_days} days: time per call or "
          f"request (ms), {args.repeat} after a warm-up; "
          f"target p95 < {TARGET_P95_MS} ms")
    print_page_table(results, labels, "attempts", TARGET_P95_MS)
    for window in WINDOWS:
        print(f"failures in the {window}' window: " + ", ".join(
            f"{rows[FAILURES][window]:,} at {size:,} attempts" for size, rows in results.items()))
    print(f"baseline, {BASELINE}: " + ", ".join(
        f"{size:,} attempts p50 {rows[BASELINE]['p50']:.1f} ms" for size, rows in results.items()))
    print(f"{FIRST_PASS} (every kept hour): " + ", ".join(
        f"{size:,} attempts {rows[FIRST_PASS]['p50'] / 1000:.2f} s" for size, rows in results.items()))
    largest = results[sizes[-1]]
    figure(f"{FIRST_PASS} at {sizes[-1]:,} attempts", largest[FIRST_PASS]["p50"] / 1000, "s",
           baseline=results[sizes[0]][FIRST_PASS]["p50"] / 1000, baseline_name=f"{sizes[0]:,} attempts")
    # Beside the times, what they were times of: docs/benchmarks.md compares windows by their failures.
    for window in WINDOWS:
        figure(f"failures in the {window}' window at {sizes[-1]:,} attempts", largest[FAILURES][window], "failures",
               baseline=results[sizes[0]][FAILURES][window], baseline_name=f"{sizes[0]:,} attempts")
    seven = largest[FAILURES]["7 days"]
    if seven:
        figure(f"selector, 7 days, every policy, p50 per failure in the window at {sizes[-1]:,} attempts",
               largest["selector, 7 days, every policy"]["p50"] * 1000 / seven, "µs",
               baseline=largest[BASELINE]["p50"] * 1000 / seven, baseline_name="counted from the attempts")
    figure(f"selector, 7 days, every policy, p50 at {sizes[-1]:,} attempts",
           largest["selector, 7 days, every policy"]["p50"], "ms", baseline=largest[BASELINE]["p50"],
           baseline_name="counted from the attempts (no rollup)")
    write_figures(args.json, sizes=sizes, repeat=args.repeat, history_days=args.history_days)


if __name__ == "__main__":
    main()
