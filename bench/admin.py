"""Server time and query count of the console's resource pages, with 100,000 resources beside 1,000.

    .venv/bin/python bench/admin.py [--sizes 1000,100000] [--repeat 30] [--events-per-resource 10] [--failing 10]

For each size, a database of its own (`retryops_bench_admin<size>_f<failing>` beside the app's
`retryops`, see bench/common.py; built once and kept, `DROP DATABASE` removes it) holds that many
resources in 5 pools, with their failure statistics (`--failing` percent failing now: an outage that
hit many resources of each pool with one signature, resources locked or failing on their own,
quarantined ones; 5 percent in use; the rest healthy) and 10 timeline events each (1,000,000 for
100,000 resources). A superuser then requests each page through Django's test Client `--repeat`
times after one warm-up request: the resource list unfiltered, sorted, on its 10th page, filtered
(state, pool, diagnosis, failed in the last hour) and searched (by key and by reason), and a busy
resource's page with its timeline. It prints the server time per request, p50 and
p95, and the queries per request, each size beside the other (target p95 under 300 ms). Each size
runs in a child process of its own, because Django holds one database per process.
"""

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (  # noqa: E402
    add_json_option,
    page_sizes_in_children,
    print_page_table,
    setup_django,
    superuser_client,
    time_pages,
    write_figures,
)

POOLS = 5
TARGET_P95_MS = 300

# (label, path after the changelist's URL or "resource", query string)
PAGES = [
    ("list, unfiltered", "?"),
    ("list, by failure count", "?o=-{failures}"),
    ("list, oldest failure first", "?o={failed_at}"),
    ("list, page 10", "?p=10"),
    ("list, state failed", "?state__exact=failed"),
    ("list, one pool", "?pool__id__exact={pool_id}"),
    ("list, failed last hour", "?failed_within=hour"),
    ("list, diagnosis environment", "?diagnosis=environment"),
    ("list, diagnosis resource", "?diagnosis=resource"),
    ("list, diagnosis unclear", "?diagnosis=unclear"),
    ("list, search key", "?q=r4242"),
    ("list, search reason", "?q=locked"),
    ("resource page", "resource"),
    ("resource page, timeline p3", "resource?timeline=3"),
]

# One statement per table, all in the database: a Python loop over a million rows would be the
# benchmark's slowest part. random() after setseed() makes every database the same.
BUILD_POOLS = """
    INSERT INTO resources_resourcepool (name, description, resource_noun, lease_seconds, consume_on_success, created_at)
    SELECT 'bench-admin-' || p, '', 'account', 300, false, now() FROM generate_series(1, %(pools)s) p
"""
# `failing` percent of the resources are failing now: two fifths in an outage (one signature per
# pool, within ten minutes two hours ago), three tenths locked on their own, a tenth banned and
# quarantined, a fifth with failures of their own; 5 percent are in use; the rest are healthy,
# with an older failure each.
BUILD_RESOURCES = """
    WITH rows AS (
        SELECT g, p.id AS pool_id, random() AS r, random() AS r2,
               CASE WHEN g %% 100 < %(outage)s THEN 'outage' WHEN g %% 100 < %(locked)s THEN 'locked'
                    WHEN g %% 100 < %(banned)s THEN 'banned' WHEN g %% 100 < %(failing)s THEN 'own'
                    WHEN g %% 100 < %(failing)s + 5 THEN 'busy' ELSE 'healthy' END AS shape
        FROM generate_series(1, %(size)s) g
        JOIN resources_resourcepool p ON p.name = 'bench-admin-' || (g %% %(pools)s + 1)
    )
    INSERT INTO resources_resource (
        pool_id, key, label, attributes, state, lease_token, lease_holder, leased_at, leased_until, lease_kind,
        failure_count, success_count, consecutive_failures, last_failure_reason, last_failure_category,
        last_failure_at, last_success_at, quarantine_reason, quarantined_at, probe_after,
        probation_cooldown_seconds, created_at)
    SELECT pool_id, 'r' || g || '@example.com', '', '{}',
        CASE shape WHEN 'healthy' THEN 'available' WHEN 'busy' THEN 'in_use' WHEN 'banned' THEN 'quarantined'
                   ELSE 'failed' END,
        CASE WHEN shape = 'busy' THEN md5(g::text)::uuid END,
        CASE WHEN shape = 'busy' THEN 'task ' || g ELSE '' END,
        CASE WHEN shape = 'busy' THEN now() END,
        CASE WHEN shape = 'busy' THEN now() + interval '5 minutes' END,
        CASE WHEN shape = 'busy' THEN 'use' ELSE '' END,
        10 + (r * 40)::int, 5 + (r2 * 50)::int,
        CASE WHEN shape IN ('healthy', 'busy') THEN 0 ELSE 1 + (r * 8)::int END,
        CASE shape
            WHEN 'outage' THEN 'ConnectionError: connection refused by upstream 10.0.' || (g %% 250) || '.7:443'
            WHEN 'locked' THEN 'AccountLocked: account r' || g || '@example.com locked after ' || (g %% 9) || ' tries'
            WHEN 'banned' THEN 'AccountBanned: account r' || g || '@example.com is banned'
            WHEN 'own' THEN 'HTTPError: 500 for request ' || md5(g::text)
            ELSE 'TimeoutError: read timed out after ' || (g %% 60) || 's' END,
        CASE WHEN shape = 'banned' THEN 'non_retryable' ELSE 'retryable' END,
        CASE WHEN shape = 'outage' THEN now() - interval '2 hours' + (g %% 600) * interval '1 second'
             ELSE now() - (r * interval '7 days') END,
        now() - (r2 * interval '7 days'),
        CASE WHEN shape = 'banned' THEN 'AccountBanned: account is banned' ELSE '' END,
        CASE WHEN shape = 'banned' THEN now() - interval '1 day' END,
        NULL, 0, now() - interval '30 days'
    FROM rows
"""
EVENT_KINDS = ("claimed", "released_success", "claimed", "released_failure", "claimed", "held_for_retry", "claimed",
               "released_failure", "reset", "quarantined")
BUILD_EVENTS = """
    INSERT INTO resources_resourceevent (resource_id, kind, actor, reason, category, lease_token, details, created_at)
    SELECT r.id, (%(kinds)s::text[])[n %% 10 + 1], 'task ' || (r.id * 10 + n),
           CASE WHEN n %% 10 IN (3, 5, 7) THEN r.last_failure_reason ELSE '' END,
           CASE WHEN n %% 10 IN (3, 5, 7) THEN 'retryable' ELSE '' END,
           NULL, '{}', now() - interval '30 days' + n * interval '1 hour'
    FROM resources_resource r, generate_series(0, %(per)s - 1) n
    ORDER BY n, r.id
"""


def build(size: int, events_per_resource: int, failing: int) -> None:
    from django.db import connection, transaction

    from resources.models import Resource, ResourceEvent

    have = Resource.objects.count()
    if have == size and ResourceEvent.objects.count() == size * events_per_resource:
        return
    shares = {"outage": failing * 4 // 10, "locked": failing * 7 // 10, "banned": failing * 8 // 10,
              "failing": failing}
    print(f"  building {size:,} resources and {size * events_per_resource:,} timeline events ...", flush=True,
          file=sys.stderr)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("TRUNCATE resources_resourceevent, resources_resource, resources_resourcepool CASCADE")
        cursor.execute("SELECT setseed(0.42)")
        cursor.execute(BUILD_POOLS, {"pools": POOLS})
        cursor.execute(BUILD_RESOURCES, {"size": size, "pools": POOLS, **shares})
        cursor.execute(BUILD_EVENTS, {"kinds": list(EVENT_KINDS), "per": events_per_resource})
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE resources_resource")
        cursor.execute("VACUUM ANALYZE resources_resourceevent")


def measure(size: int, repeat: int) -> list[dict]:
    from django.contrib import admin
    from django.contrib.auth import get_user_model
    from django.test import RequestFactory
    from django.urls import reverse

    from resources.models import Resource, ResourcePool

    client = superuser_client("bench-admin")
    changelist = reverse("admin:resources_resource_changelist")
    # A busy resource: the one with the most failures (its timeline is as long as any).
    resource = Resource.objects.order_by("-failure_count", "id").first()
    pool = ResourcePool.objects.order_by("id").first()
    # Columns by name, numbered as the admin numbers them for `o`: a subclass (scheduling's) adds
    # columns before them.
    request = RequestFactory().get(changelist)
    request.user = get_user_model().objects.get(username="bench-admin")
    model_admin = admin.site._registry[Resource]
    shown = ["action_checkbox"] * bool(model_admin.get_actions(request)) + list(model_admin.get_list_display(request))
    columns = {name: n for n, name in enumerate(shown)}
    pages = []
    for label, query in PAGES:
        if query.startswith("resource"):
            url = reverse("admin:resources_resource_change", args=[resource.pk]) + query[len("resource"):]
        else:
            url = changelist + query.format(pool_id=pool.pk, **columns)
        pages.append((label, url))
    return time_pages(client, pages, repeat)


def child(size: int, repeat: int, events_per_resource: int, failing: int) -> None:
    # Each size and share in a database of its own: retryops_bench_admin100000_f10.
    setup_django(suffix=f"_bench_admin{size}_f{failing}")
    build(size, events_per_resource, failing)
    print(json.dumps(measure(size, repeat)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1000,100000", help="Comma-separated numbers of resources.")
    parser.add_argument("--repeat", type=int, default=30, help="Timed requests per page.")
    parser.add_argument("--events-per-resource", type=int, default=10, help="Timeline events of each resource.")
    parser.add_argument("--failing", type=int, default=10, choices=range(1, 96), metavar="1..95",
                        help="Percent of the resources failing now (35 is a large outage).")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    add_json_option(parser)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.repeat, args.events_per_resource, args.failing)
        return
    sizes = [int(s) for s in args.sizes.split(",")]
    results = page_sizes_in_children(__file__, sizes, ["--repeat", str(args.repeat), "--events-per-resource",
                                                       str(args.events_per_resource), "--failing", str(args.failing)])
    print(f"server time per request (ms) and queries, {args.repeat} requests per page after a warm-up, "
          f"{args.failing}% of the resources failing, {args.events_per_resource} timeline events each; "
          f"target p95 < {TARGET_P95_MS} ms")
    print_page_table(results, [label for label, _ in PAGES], "resources", TARGET_P95_MS)
    write_figures(args.json, sizes=sizes, repeat=args.repeat, failing=args.failing)


if __name__ == "__main__":
    main()
