"""Server time of a /metrics scrape with 1,000,000 attempts and 100,000 resources, beside 1,000.

    .venv/bin/python bench/metrics.py [--sizes 1000,1000000] [--repeat 30] [--new-events 10000]

For each size, a database of its own (`retryops_bench_metrics<size>` beside the app's, see
bench/common.py; built once and kept, `DROP DATABASE` removes it) holds the ops dashboard
benchmark's history (bench/dashboard.py's build: that many attempts of two thirds as many tasks
over 7 days, their task events, dead letters and work orders, one resource per ten attempts).

In each, the metrics rollup is emptied and its first pass, over the whole history, is timed;
then `--repeat` scrapes of /metrics through Django's test Client (from 127.0.0.1, after one
warm-up) give the server time per scrape, p50 and p95, and its queries (target p95 < 200 ms at
1,000,000 attempts). Then `--new-events` task events are written with their attempts (half as
many tasks, each failing once and succeeding at its retry), a scrape is timed while they are not
rolled up yet (it counts them live), and the one rollup pass that takes them in. Each size runs
in a child process of its own, because Django holds one database per process.

EXTRA_REPORTS is the hook for other benchmarks to print their figures in the same run (the
what-if's, bench/whatif.py): callables that print their lines.
"""

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (  # noqa: E402
    FIGURES,
    add_json_option,
    figure,
    page_sizes_in_children,
    read_figures,
    setup_django,
    time_pages,
    write_figures,
)

TARGET_P95_MS = 200
DAYS = 7


def what_if_report() -> None:
    """bench/whatif.py's figures: the policy what-if over 1,000,000 recorded attempts beside 10,000
    (target under 10 s), in a process of its own, since it keeps a database of its own; its figures
    join this run's."""
    import subprocess
    import tempfile

    print("\npolicy what-if (bench/whatif.py):", flush=True)
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        done = subprocess.run([sys.executable, str(Path(__file__).with_name("whatif.py")), "--json", out.name],
                              check=False)
        if done.returncode == 0:
            FIGURES.extend(read_figures(out.name))


# Callables run after the metrics' figures are printed, each printing its own lines.
EXTRA_REPORTS: list = [what_if_report]

# `new` tasks of the bench's first flow and pool, each failing at attempt 1 and succeeding at its
# retry a second later: two attempts and two task events (a retry scheduled, a retry succeeded)
# each, written in one transaction as the services would write them.
NEW_EVENTS = """
    WITH t AS (
        INSERT INTO scheduling_task (flow, pool_id, payload, state, strict, is_probe, policy_id, attempt_count,
            next_run_at, deadline_at, idempotency_key, created_by, created_at, finished_at, held_lease_token,
            rq_job_id, result, last_error, last_error_signature, last_error_category, pinned_resource_id,
            requested_resource_id, resource_id)
        SELECT 'charge', (SELECT min(id) FROM resources_resourcepool), '{}', 'succeeded', false, false,
               (SELECT min(id) FROM scheduling_retrypolicy), 2, NULL, NULL,
               'bench-new-' || %(tag)s || '-' || g, 'bench', now(), now(), NULL, '', NULL, '', '', '', NULL, NULL, NULL
        FROM generate_series(1, %(new)s) g
        RETURNING id
    ), a AS (
        INSERT INTO scheduling_attempt (task_id, number, resource_id, lease_token, worker, rq_job_id, started_at,
            scheduled_for, finished_at, outcome, error_class, error_message, error_signature, category, action,
            duration_ms)
        SELECT t.id, n, NULL, NULL, 'bench', '', now(), CASE WHEN n = 2 THEN now() - interval '1 second' END, now(),
               CASE n WHEN 1 THEN 'failed' ELSE 'succeeded' END, '', '', '', CASE n WHEN 1 THEN 'retryable' ELSE '' END,
               '', 250
        FROM t CROSS JOIN generate_series(1, 2) n
    )
    INSERT INTO scheduling_taskevent (task_id, kind, attempt_number, details, created_at)
    SELECT t.id, CASE n WHEN 1 THEN 'task.retry.scheduled' ELSE 'task.retry.succeeded' END, n, '{}', now()
    FROM t CROSS JOIN generate_series(1, 2) n
"""


def write_new_events(count: int) -> int:
    """`count` new task events (and their tasks and attempts), committed; returns the writing
    transaction's id."""
    from django.db import connection, transaction

    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(NEW_EVENTS, {"new": count // 2, "tag": str(time.time_ns())})
        cursor.execute("SELECT pg_current_xact_id()::text")
        return int(cursor.fetchone()[0])


def remove_new_events() -> None:
    """Take the new tasks out again, so the next run finds the history it built (bench/dashboard.py's
    build starts over when the number of tasks differs)."""
    from django.db import connection, transaction

    new = "SELECT id FROM scheduling_task WHERE idempotency_key LIKE 'bench-new-%%'"
    with transaction.atomic(), connection.cursor() as cursor:
        for table in ("scheduling_taskevent", "scheduling_attempt"):
            cursor.execute(f"DELETE FROM {table} WHERE task_id IN ({new})")
        cursor.execute(f"DELETE FROM scheduling_task WHERE id IN ({new})")


def pass_covering(xid: int) -> float:
    """Seconds the rollup passes took to take in the rows of transaction `xid`. A pass stops below
    the oldest transaction running on the server, which other sessions may hold back a while:
    passes are repeated until one covers it, and the time of every pass until then is summed."""
    from telemetry.metrics.rollup import roll_up_metrics

    deadline, seconds = time.monotonic() + 300, 0.0
    while True:
        done = roll_up_metrics()
        seconds += done.seconds
        if done.to_xid > xid:
            return seconds
        if time.monotonic() > deadline:
            raise SystemExit(f"no rollup pass got past transaction {xid} in 300 s: a transaction stays open on "
                             "the server (pg_stat_activity)")
        time.sleep(0.2)


def child(size: int, repeat: int, new_events: int) -> None:
    setup_django(suffix=f"_bench_metrics{size}")
    from dashboard import build
    from django.conf import settings
    from django.db import connection
    from django.test import Client

    from telemetry.metrics.models import MetricRollup, MetricWatermark

    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "testserver"]
    build(size, DAYS)
    with connection.cursor() as cursor:
        cursor.execute(f"TRUNCATE {MetricRollup._meta.db_table}, {MetricWatermark._meta.db_table}")
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_current_xact_id()::text")  # a transaction of its own, after everything built
        built = int(cursor.fetchone()[0])
    first_pass = pass_covering(built)
    client = Client()
    [rolled] = time_pages(client, [("scrape", "/metrics")], repeat)
    xid = write_new_events(new_events)
    [live] = time_pages(client, [("scrape", "/metrics")], repeat)
    pass_seconds = pass_covering(xid)
    [after] = time_pages(client, [("scrape", "/metrics")], max(5, repeat // 3))
    series = MetricRollup.objects.count()
    remove_new_events()
    print(json.dumps([
        {**rolled, "page": "scrape"}, {**live, "page": "scrape, new events live"},
        {**after, "page": "scrape after the pass"},
        {"page": "first pass", "p50": first_pass * 1000, "p95": first_pass * 1000, "queries": 0},
        {"page": "pass", "p50": pass_seconds * 1000, "p95": pass_seconds * 1000, "queries": series},
    ]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1000,1000000", help="Comma-separated numbers of attempts.")
    parser.add_argument("--repeat", type=int, default=30, help="Timed scrapes.")
    parser.add_argument("--new-events", type=int, default=10_000, help="Events written before the timed pass.")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    add_json_option(parser)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.repeat, args.new_events)
        return
    sizes = [int(s) for s in args.sizes.split(",")]
    results = page_sizes_in_children(__file__, sizes, ["--repeat", str(args.repeat), "--new-events",
                                                       str(args.new_events)])
    print(f"/metrics server time per scrape (ms), {args.repeat} scrapes after a warm-up; target p95 < "
          f"{TARGET_P95_MS} ms at the largest size")
    width = 40
    print(f"{'':{width}}" + "".join(f"{f'{s:,} attempts':>30}" for s in sizes))
    print(f"{'':{width}}" + "".join(f"{'p50':>10}{'p95':>10}{'queries':>10}" for _ in sizes))
    for label in ("scrape", "scrape, new events live", "scrape after the pass"):
        print(f"{label:{width}}" + "".join(
            f"{results[s][label]['p50']:>10.1f}{results[s][label]['p95']:>10.1f}{results[s][label]['queries']:>10}"
            for s in sizes))
    small, large = sizes[0], sizes[-1]
    ratio = results[large]["scrape"]["p50"] / results[small]["scrape"]["p50"]
    print(f"scrape p50 ratio {large:,} / {small:,} attempts: {ratio:.2f}; "
          f"p95 at {large:,}: {results[large]['scrape']['p95']:.1f} ms (target < {TARGET_P95_MS} ms)")
    for size in sizes:
        print(f"rollup at {size:,} attempts: first pass over the whole history "
              f"{results[size]['first pass']['p50'] / 1000:.2f} s; one pass after {args.new_events:,} new events "
              f"{results[size]['pass']['p50']:.1f} ms ({results[size]['pass']['queries']:,} rollup rows)")
    for label, name in (("scrape", "scrape"), ("scrape, new events live", "scrape with new events not rolled up"),
                        ("scrape after the pass", "scrape after the rollup pass")):
        figure(f"/metrics {name}, p95 at {large:,} attempts", results[large][label]["p95"], "ms",
               baseline=results[small][label]["p95"], baseline_name=f"{small:,} attempts",
               target=f"< {TARGET_P95_MS} ms" if label == "scrape" else "")
    figure(f"rollup, first pass over {large:,} attempts", results[large]["first pass"]["p50"] / 1000, "s",
           baseline=results[small]["first pass"]["p50"] / 1000, baseline_name=f"{small:,} attempts")
    figure(f"rollup, one pass after {args.new_events:,} new events, {large:,} attempts",
           results[large]["pass"]["p50"] / 1000, "s", baseline=results[small]["pass"]["p50"] / 1000,
           baseline_name=f"{small:,} attempts")
    for report in EXTRA_REPORTS:
        report()
    write_figures(args.json, sizes=sizes, repeat=args.repeat, new_events=args.new_events)


if __name__ == "__main__":
    main()
