"""Dead-letter clean-up throughput and memory, beside a bare DELETE loop.

    .venv/bin/python bench/dlq_cleanup.py [--rows 100000] [--batch-size 5000] [--sweep 1000,5000,10000]

Each phase starts from a fresh table of N discarded/resolved dead letters that died 40 days ago
(with their dead tasks, written by INSERT ... SELECT generate_series) and removes all of them:
  baseline          a bare `DELETE ... WHERE id IN (SELECT id ... LIMIT n)` loop, autocommit: no
                    lock re-check, no archive, no audit entry;
  purge             cleanup_dead_letters(purge=True): the service, one audit entry per batch;
  archive           cleanup_dead_letters(archive=<temp file>, purge=True): each batch written as
                    JSON Lines and fsync'ed before it commits;
  replaced-*        the clean-up the service replaced (kept here for comparison): per batch the
                    ids, then the rows locked and read into Python, JSON-encoded there, then a
                    DELETE of them, with the same audit entry.
Each phase runs in a fresh Python process, so its peak RSS (ru_maxrss) is its own; the RSS the
process had before the phase (Python, Django, the connection) is printed beside it. Prints rows/s,
the ratio to the baseline and the machine's load average (this machine is shared and noisy: the
ratios of one run are the figures, the absolute rates move several-fold between minutes). With --sweep, the service phases again at each batch size, each
beside a baseline at the same size. Runs in a database of its own beside the app's
(`retryops_bench_dlq`, see bench/common.py), whose task and dead-letter tables it empties.
"""

import argparse
import gc
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# The app's URL, before setup_django points DATABASE_URL at the benchmark database: the phase
# processes are handed this one, so they derive the same benchmark database and not one beside it.
APP_DATABASE_URL = os.environ.get("DATABASE_URL")
BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))
from common import add_json_option, figure, setup_django, write_figures  # noqa: E402

setup_django("_bench_dlq")

from django.core.serializers.json import DjangoJSONEncoder  # noqa: E402
from django.db import connection, transaction  # noqa: E402

from audit.choices import AuditAction  # noqa: E402
from audit.services import Target, record_audit  # noqa: E402
from compensation.models import DeadLetter  # noqa: E402
from compensation.services.cleanup import cleanup_dead_letters, cleanup_queryset  # noqa: E402
from resources.models import ResourcePool  # noqa: E402
from scheduling.models import RetryPolicy, Task  # noqa: E402

STATES = ["resolved", "discarded"]
AGE_DAYS = 30
LETTERS, TASKS = DeadLetter._meta.db_table, Task._meta.db_table
BARE_DELETE = f"""
    DELETE FROM {LETTERS} WHERE id IN (
        SELECT id FROM {LETTERS} WHERE state = ANY(%s) AND died_at < now() - make_interval(days => %s::int) LIMIT %s)"""


def fill(rows: int) -> None:
    """A fresh table of `rows` settled dead letters, each with its dead task."""
    pool, _ = ResourcePool.objects.get_or_create(name="bench-dlq")
    policy, _ = RetryPolicy.objects.get_or_create(name="bench-dlq")
    with connection.cursor() as cursor:
        # Cascades to the other tables pointing at tasks: nothing else uses this database.
        cursor.execute(f"TRUNCATE {LETTERS}, {TASKS} CASCADE")
        cursor.execute(
            f"""WITH tasks AS (
                    INSERT INTO {TASKS} (flow, pool_id, payload, state, strict, is_probe, policy_id, attempt_count,
                        idempotency_key, created_by, created_at, finished_at, rq_job_id, last_error,
                        last_error_signature, last_error_category)
                    SELECT 'bench', %(pool)s, '{{}}', 'dead', false, false, %(policy)s, 3, 'bench-dlq-' || g, 'bench',
                        now() - interval '41 days', now() - interval '40 days' - g * interval '1 second', '',
                        'TimeoutError: upstream timed out after 30s (order ' || g || ', « retry » exhausted)',
                        'TimeoutError: upstream timed out', 'retryable'
                    FROM generate_series(1, %(rows)s) g
                    RETURNING id, pool_id, finished_at, last_error, last_error_signature, last_error_category)
                INSERT INTO {LETTERS} (task_id, flow, pool_id, last_error, error_signature, error_category,
                    attempt_count, died_at, state, replay_count, settled_at, created_at, updated_at)
                SELECT id, 'bench', pool_id, last_error, last_error_signature, last_error_category, 3, finished_at,
                    CASE WHEN id %% 2 = 0 THEN 'resolved' ELSE 'discarded' END, 0,
                    finished_at + interval '1 hour', finished_at, finished_at + interval '1 hour'
                FROM tasks""",
            {"pool": pool.pk, "policy": policy.pk, "rows": rows},
        )
        cursor.execute(f"ANALYZE {TASKS}; ANALYZE {LETTERS}")


def replaced_cleanup(*, archive, batch_size: int) -> int:
    """The purge (and archive) as cleanup_dead_letters did it before each batch was one statement."""
    queryset = cleanup_queryset(older_than_days=AGE_DAYS, states=STATES)
    last_id = removed = 0
    while ids := list(queryset.filter(pk__gt=last_id).order_by("pk").values_list("pk", flat=True)[:batch_size]):
        last_id = ids[-1]
        with transaction.atomic():
            rows = list(queryset.select_for_update(skip_locked=True).filter(pk__in=ids).order_by("pk").values())
            if archive is not None:
                archive.write("".join(json.dumps(r, cls=DjangoJSONEncoder, ensure_ascii=False) + "\n" for r in rows))
                archive.flush()
            taken = [r["id"] for r in rows]
            DeadLetter.objects.filter(pk__in=taken).delete()
            record_audit(action=AuditAction.DEAD_LETTER_CLEANUP,
                         target=Target(type="compensation.deadletter", id=f"{taken[0]}-{taken[-1]}",
                                       label=f"{len(taken)} dead letters"),
                         before={"ids": [taken[0], taken[-1]], "count": len(taken)}, after=None,
                         reason="archived and purged" if archive else "purged", actor="bench")
        removed += len(rows)
    return removed


def rss_now_kb() -> int:
    with open("/proc/self/status") as status:
        return next(int(f.split()[1]) for f in status if f.startswith("VmRSS:"))


def run_phase(phase: str, batch_size: int) -> dict:
    """In this process: remove every dead letter of the fresh table, timed; with the peak RSS."""
    gc.collect()
    try:
        # Resets the peak RSS (Linux >= 4.0): the migrate check at start-up peaks higher than
        # what is left resident, and would hide the phase's own peak.
        with open("/proc/self/clear_refs", "w") as clear:
            clear.write("5")
    except OSError:
        pass
    rss_before = rss_now_kb()
    archived_bytes = 0
    start = time.perf_counter()
    if phase == "baseline":
        removed = 0
        with connection.cursor() as cursor:
            while True:
                cursor.execute(BARE_DELETE, [STATES, AGE_DAYS, batch_size])
                if not cursor.rowcount:
                    break
                removed += cursor.rowcount
    elif phase == "purge":
        removed = cleanup_dead_letters(older_than_days=AGE_DAYS, states=STATES, actor="bench", purge=True,
                                       batch_size=batch_size).purged
    elif phase == "replaced-purge":
        removed = replaced_cleanup(archive=None, batch_size=batch_size)
    else:
        with tempfile.NamedTemporaryFile("a", encoding="utf-8", suffix=".jsonl") as archive:
            if phase == "archive":
                result = cleanup_dead_letters(older_than_days=AGE_DAYS, states=STATES, actor="bench",
                                              archive=archive, purge=True, batch_size=batch_size)
                assert result.archived == result.purged, result
                removed = result.purged
            else:
                removed = replaced_cleanup(archive=archive, batch_size=batch_size)
            archived_bytes = os.path.getsize(archive.name)
    seconds = time.perf_counter() - start
    left = DeadLetter.objects.count()
    assert left == 0, f"{phase}: {left} dead letters left"
    return {"rows": removed, "seconds": seconds, "rss_before_kb": rss_before,
            "peak_rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, "archived_bytes": archived_bytes}


def measure(phase: str, rows: int, batch_size: int) -> dict:
    """Fill a fresh table here, then run the phase in a fresh process of its own."""
    fill(rows)
    env = dict(os.environ)
    env.pop("DATABASE_URL")
    if APP_DATABASE_URL:
        env["DATABASE_URL"] = APP_DATABASE_URL
    out = subprocess.run([sys.executable, __file__, "--phase", phase, "--batch-size", str(batch_size)],
                         env=env, check=True, capture_output=True, text=True).stdout
    figures = json.loads(out.strip().splitlines()[-1])
    assert figures["rows"] == rows, (phase, figures)
    return figures


def line(label: str, figures: dict, baseline: dict | None) -> str:
    rate = figures["rows"] / figures["seconds"]
    ratio = f"{rate / (baseline['rows'] / baseline['seconds']):.2f}" if baseline else "1.00"
    archive = f"  archive {figures['archived_bytes'] / 2**20:.1f} MB" if figures["archived_bytes"] else ""
    return (f"  {label:<28} {rate:>9,.0f} rows/s  ratio {ratio:>5}  peak RSS {figures['peak_rss_kb'] / 1024:6.1f} MB"
            f" (RSS at its start: {figures['rss_before_kb'] / 1024:5.1f} MB){archive}")


PHASES = {"replaced-purge": "replaced clean-up, purge", "purge": "service, purge",
          "replaced-archive": "replaced, archive + purge", "archive": "service, archive + purge"}


def compare(rows: int, batch_size: int) -> None:
    baseline = measure("baseline", rows, batch_size)
    print(line("bare DELETE loop (baseline)", baseline, None), flush=True)
    for phase, label in PHASES.items():
        figures = measure(phase, rows, batch_size)
        print(line(label, figures, baseline), flush=True)
        figure(f"{label}, batches of {batch_size:,}", figures["rows"] / figures["seconds"], "rows/s",
               baseline=baseline["rows"] / baseline["seconds"], baseline_name="bare DELETE loop",
               target=">= 20,000 rows/s")
        figure(f"{label}, peak RSS", figures["peak_rss_kb"] / 1024, "MB", baseline=baseline["peak_rss_kb"] / 1024,
               baseline_name="bare DELETE loop's process", target="< 150 MB")
    print(f"  load average {os.getloadavg()[0]:.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--batch-size", type=int, default=None,
                        help="Rows per batch (baseline and service); default: the service's default.")
    parser.add_argument("--sweep", default="", help="Comma-separated batch sizes to compare as well.")
    parser.add_argument("--phase", choices=["baseline", *PHASES], help=argparse.SUPPRESS)
    add_json_option(parser)
    args = parser.parse_args()
    if args.batch_size is None:
        args.batch_size = cleanup_dead_letters.__kwdefaults__["batch_size"]
    if args.phase:
        print(json.dumps(run_phase(args.phase, args.batch_size)))
        return

    print(f"database: PostgreSQL {connection.pg_version}, cores: {os.cpu_count()}, "
          f"load average {os.getloadavg()[0]:.1f}")
    print(f"\n{args.rows:,} dead letters removed per phase, batches of {args.batch_size:,}, each phase in a fresh "
          "process (targets: >= 20,000 rows/s, peak RSS < 150 MB)")
    compare(args.rows, args.batch_size)
    for size in [int(s) for s in args.sweep.split(",") if s.strip()]:
        print(f"\nbatches of {size:,}")
        compare(args.rows, size)
    write_figures(args.json, rows=args.rows, batch_size=args.batch_size)


if __name__ == "__main__":
    main()
