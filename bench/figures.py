"""The acceptance figures at 1,000,000 attempts beside 1,000: the /metrics gauges' scrape, the
periodic job that refreshes their snapshot, and the figures page over 1 h, 24 h and 7 d.

    .venv/bin/python bench/figures.py [--sizes 1000,1000000] [--repeat 20]

Each size has a database of its own (`retryops_bench_figures<size>`, beside the app's; built
once and kept, `DROP DATABASE` removes it) holding bench/dashboard.py's history (that many
attempts over 7 days, their task events, dead letters and work orders), with every retry given
the due time its backoff set (0 to 40 s before its start, so some started late) and every work
order a trigger page sent a few minutes after its first dead letter, and the rollups of attempts'
first pass run (and timed) as the ops process would run it. A superuser then times,
`--repeat` times after a warm-up: AcceptanceCollector.collect() (what a scrape of /metrics costs
for these gauges; target under 20 ms), refresh_acceptance_snapshot() over 24 h (the periodic job,
every minute), and the figures page per window, and prints p50, p95 and
the queries of each, the sizes side by side. Each size runs in a child process of its own.
"""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (  # noqa: E402
    first_rollup_pass,
    print_page_table,
    setup_django,
    sizes_in_children,
    superuser_client,
    time_pages,
    timed,
    write_figures,
)

TARGET_SCRAPE_MS = 20
# The console's pages' target (bench/dashboard.py); the refresh job runs in a worker, not a request.
TARGET_PAGE_MS = 300
DAYS = 7
FIRST_PASS = "rollups, first pass"  # the ops process's first pass over the history (scheduling.services.rollups)
# What the dashboard's history lacks: the due time of each retry, and the pages about work orders.
ENRICH = """
    UPDATE scheduling_attempt SET scheduled_for = started_at - (random() * interval '40 seconds')
    WHERE number > 1 AND scheduled_for IS NULL;
    INSERT INTO compensation_notification (created_at, channel, event, dedup_key, subject_id, subject_label, payload,
        state, attempts, next_attempt_at, last_attempt_at, last_error, last_status_code, sent_at, resends)
    SELECT w.first_dead_at, 'slack', 'trigger', 'wo-' || w.id, w.id, '', '{}', 'sent', 1, NULL,
        w.first_dead_at + random() * interval '6 minutes', '', 200, w.first_dead_at + random() * interval '6 minutes', 0
    FROM compensation_workorder w
    WHERE w.first_dead_at IS NOT NULL AND NOT EXISTS (SELECT 1 FROM compensation_notification n WHERE n.subject_id = w.id)
"""


def measure(repeat: int) -> list[dict]:
    from django.urls import reverse

    from telemetry.figures.selectors import AcceptanceCollector
    from telemetry.figures.services import refresh_acceptance_snapshot

    refresh_acceptance_snapshot(seconds=86400)
    rows = [timed("scrape: AcceptanceCollector", lambda: list(AcceptanceCollector().collect()), repeat),
            timed("refresh job (24 h)", lambda: refresh_acceptance_snapshot(seconds=86400), max(3, repeat // 4))]
    pages = [(f"figures page, {label}", f"{reverse('acceptance_figures')}?window={seconds}")
             for label, seconds in (("1 h", 3600), ("24 h", 86400), ("7 d", 7 * 86400))]
    return rows + time_pages(superuser_client("bench-figures"), pages, max(3, repeat // 4))


def child(size: int, repeat: int) -> None:
    setup_django(suffix=f"_bench_figures{size}")
    from dashboard import build
    from django.conf import settings
    from django.db import connection

    settings.RETRYOPS_FIGURES_WINDOW_SECONDS = 86400
    build(size, DAYS)
    with connection.cursor() as cursor:
        for statement in ENRICH.split(";\n"):
            cursor.execute(statement)
        cursor.execute("VACUUM ANALYZE scheduling_attempt")
        cursor.execute("VACUUM ANALYZE compensation_notification")
    first_pass = {"page": FIRST_PASS, **first_rollup_pass()}
    print(json.dumps([*measure(repeat), first_pass]))


LABELS = ["scrape: AcceptanceCollector", "refresh job (24 h)", "figures page, 1 h", "figures page, 24 h",
          "figures page, 7 d"]


def main() -> None:
    args, sizes, results = sizes_in_children(__file__, __doc__, child, repeat=20,
                                             repeat_help="Timed scrapes (a quarter as many of the rest).")
    print("time per call (ms) and queries, after a warm-up")
    print_page_table(results, LABELS[:1], "attempts", TARGET_SCRAPE_MS)
    print_page_table(results, LABELS[1:], "attempts", TARGET_PAGE_MS)
    print(f"{FIRST_PASS}: " + ", ".join(f"{size:,} attempts {rows[FIRST_PASS]['p50'] / 1000:.2f} s"
                                       for size, rows in results.items()))
    write_figures(args.json, sizes=sizes, repeat=args.repeat)


if __name__ == "__main__":
    main()
