"""The cost of claiming one new task event, as processed events pile up, beside the old claim.

    .venv/bin/python bench/outbox.py [--sizes 1000,200000] [--claims 15]

For each size, writes that many events of one kind, processed by two consumers, then times
claims of 1 new event: through claim_task_events (a watermark per consumer and kind, so a claim
looks only at the events written since the consumer caught up) and through the claim it
replaced (kept here as the baseline: an anti-join of every event of the kind against the
consumer's deliveries). Prints the medians and their ratios. Runs in a database of its own
beside the app's (`retryops_bench`, see bench/common.py), whose task-event tables it empties.
"""

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import add_json_option, figure, setup_django, write_figures  # noqa: E402

setup_django()

from django.db import connection, transaction  # noqa: E402
from django.utils import timezone  # noqa: E402

from resources.models import ResourcePool  # noqa: E402
from scheduling.choices import TaskEventKind, TaskState  # noqa: E402
from scheduling.models import (  # noqa: E402
    RetryPolicy,
    Task,
    TaskEvent,
    TaskEventDelivery,
    TaskEventWatermark,
)
from scheduling.services import claim_task_events  # noqa: E402

DEAD = TaskEventKind.DEAD
WATERMARK, ANTI_JOIN = "bench_watermark", "bench_anti_join"
EVENTS, DELIVERIES, MARKS = (m._meta.db_table for m in (TaskEvent, TaskEventDelivery, TaskEventWatermark))

# The claim before watermarks (scheduling/services/events.py up to migration 0003).
ANTI_JOIN_CLAIM = f"""
    WITH picked AS (
        SELECT e.id FROM {EVENTS} e
        WHERE e.kind = ANY(%(kinds)s)
          AND NOT EXISTS (SELECT 1 FROM {DELIVERIES} d
                          WHERE d.consumer = %(consumer)s AND d.event_id = e.id)
        ORDER BY e.id
        LIMIT %(limit)s
        FOR NO KEY UPDATE OF e SKIP LOCKED
    )
    INSERT INTO {DELIVERIES} (consumer, event_id, delivered_at)
    SELECT %(consumer)s, id, now() FROM picked
    ON CONFLICT (consumer, event_id) DO NOTHING
    RETURNING event_id
"""


def bench_task() -> Task:
    pool, _ = ResourcePool.objects.get_or_create(name="bench-outbox")
    policy, _ = RetryPolicy.objects.get_or_create(name="bench-outbox")
    task, _ = Task.objects.get_or_create(
        idempotency_key="bench-outbox",
        defaults={"flow": "noop", "pool": pool, "policy": policy, "state": TaskState.DEAD, "strict": False,
                  "created_by": "bench", "finished_at": timezone.now()},
    )
    return task


def add_processed(task: Task, count: int) -> None:
    """`count` more events, already delivered to both consumers, in one transaction."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            f"""INSERT INTO {EVENTS} (task_id, kind, details, created_at)
                SELECT %s, %s, '{{}}', now() FROM generate_series(1, %s)""",
            [task.pk, DEAD, count],
        )
        cursor.execute(
            f"""INSERT INTO {DELIVERIES} (consumer, event_id, delivered_at)
                SELECT c, e.id, now() FROM {EVENTS} e CROSS JOIN unnest(%s::varchar[]) c
                ON CONFLICT (consumer, event_id) DO NOTHING""",
            [[WATERMARK, ANTI_JOIN]],
        )
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {EVENTS}; ANALYZE {DELIVERIES}")


def catch_up(timeout: float) -> float:
    """Claims until the watermark passes every event so far; a transaction still running anywhere
    on the server (other databases too) holds it back. Returns the seconds that took."""
    newest = TaskEvent.objects.order_by("-xid").values_list("xid", flat=True).first()
    start = time.perf_counter()
    while time.perf_counter() - start < timeout:
        with transaction.atomic():
            claim_task_events(consumer=WATERMARK, kinds=[DEAD], limit=1)
        mark = TaskEventWatermark.objects.filter(consumer=WATERMARK, kind=DEAD).first()
        if mark and mark.below_xid > newest:
            return time.perf_counter() - start
        time.sleep(0.05)
    print(f"  the watermark did not pass the newest event within {timeout:.0f} s: a long transaction is running",
          flush=True)
    return time.perf_counter() - start


def anti_join_claim() -> list[int]:
    """The old claim_task_events: the anti-join, then the events it delivered."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(ANTI_JOIN_CLAIM, {"consumer": ANTI_JOIN, "kinds": [DEAD], "limit": 100})
        ids = [row[0] for row in cursor.fetchall()]
        return [e.pk for e in TaskEvent.objects.filter(pk__in=ids).order_by("id")]


def watermark_claim() -> list[int]:
    with transaction.atomic():
        return [e.pk for e in claim_task_events(consumer=WATERMARK, kinds=[DEAD], limit=100)]


def time_claims(task: Task, claims: int) -> tuple[float, float]:
    """Median milliseconds to claim 1 new event, (anti-join, watermark), each claim in its own transaction."""
    spent = {anti_join_claim: [], watermark_claim: []}
    for _ in range(claims):
        new = TaskEvent.objects.create(task=task, kind=DEAD, details={}).pk
        for claim, times in spent.items():
            start = time.perf_counter()
            got = claim()
            times.append((time.perf_counter() - start) * 1000)
            assert got == [new], (claim.__name__, got, new)
    return statistics.median(spent[anti_join_claim]), statistics.median(spent[watermark_claim])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1000,200000", help="Comma-separated counts of processed events.")
    parser.add_argument("--claims", type=int, default=15, help="Claims timed at each size.")
    parser.add_argument("--catch-up-timeout", type=float, default=30.0)
    add_json_option(parser)
    args = parser.parse_args()
    sizes = sorted(int(s) for s in args.sizes.split(","))

    with connection.cursor() as cursor:
        cursor.execute(f"TRUNCATE {MARKS}, {DELIVERIES}, {EVENTS}")
    task = bench_task()
    print(f"database: PostgreSQL {connection.pg_version}, cores: {os.cpu_count()}\n")
    print(f"time to claim 1 new event, median of {args.claims} claims, each in its own transaction")
    print(f"{'processed':>10} {'anti-join (baseline)':>21} {'watermark':>10} {'watermark/anti-join':>20}")
    rows, have = [], 0
    for size in sizes:
        add_processed(task, size - have)
        have = size
        caught_up = catch_up(args.catch_up_timeout)
        old, new = time_claims(task, args.claims)
        have += args.claims
        rows.append((size, old, new))
        print(f"{size:>10,} {old:>18.3f} ms {new:>7.3f} ms {new / old:>20.3f}"
              f"   (watermark caught up in {caught_up:.2f} s)", flush=True)
    (small, old_small, new_small), (large, old_large, new_large) = rows[0], rows[-1]
    print(f"\ngrowth from {small:,} to {large:,} processed: anti-join x{old_large / old_small:.1f}, "
          f"watermark x{new_large / new_small:.2f} (target <= 1.5)")
    figure(f"claim of 1 new event, {large:,} processed", new_large, "ms", baseline=old_large,
           baseline_name="the anti-join claim it replaced")
    figure(f"watermark claim's growth, {small:,} to {large:,} processed", new_large, "ms", baseline=new_small,
           baseline_name=f"the same at {small:,}", target="ratio <= 1.5")
    write_figures(args.json, sizes=sizes, claims=args.claims)


if __name__ == "__main__":
    main()
