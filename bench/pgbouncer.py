"""What PgBouncer in transaction mode costs the claim: bench/claim.py's claim+release pairs through
the services, straight to PostgreSQL and through a PgBouncer, in the same run.

    .venv/bin/python bench/pgbouncer.py [--seconds 5] [--procs 1,4,16] [--pool-size 20] [--rounds 1]

Three ways, interleaved per number of processes so a busy machine weighs on each alike:
- direct: the app's defaults (server-side binding: psycopg prepares the hot statements);
- direct, pooler settings: what DB_TRANSACTION_POOLER=true sets (no prepared statements, no
  server-side cursors), straight to PostgreSQL, which tells the pooler's own cost from theirs;
- pgbouncer: the same settings through Debian's pgbouncer in transaction mode, `--pool-size`
  server connections (retryops.devservices.transaction_pooler).
Then the time per pair from one process each way. With --rounds N, each figure is the median of
N rounds, the three ways taking turns in each (for a machine others are loading). Runs in
bench/claim.py's database and pool.
"""

import argparse
import copy
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import dj_database_url  # noqa: E402
from claim import SMALL, ensure_pool, throughput, time_per_claim  # noqa: E402  (sets Django up)
from common import add_json_option, figure, write_figures  # noqa: E402
from django.db import connection, connections  # noqa: E402

from retryops.devservices import transaction_pooler  # noqa: E402


def use(settings_dict: dict) -> None:
    """Point the default connection at `settings_dict` (workers forked later inherit it)."""
    connections.close_all()
    connection.settings_dict.clear()
    connection.settings_dict.update(copy.deepcopy(settings_dict))


def pooler_settings(direct: dict, url: str | None = None) -> dict:
    """`direct` as settings.py makes it with DB_TRANSACTION_POOLER=true, at `url` if given."""
    pooled = copy.deepcopy(direct)
    pooled["DISABLE_SERVER_SIDE_CURSORS"] = True
    for option in ("server_side_binding", "prepare_threshold", "options"):
        pooled["OPTIONS"].pop(option, None)
    if url:
        target = dj_database_url.parse(url)
        pooled.update({key: target[key] for key in ("HOST", "PORT", "NAME", "USER")})
    return pooled


def median_of(rounds: int, ways: dict, measure) -> dict:
    """The median of `rounds` measures of each way, the ways taking turns in each round."""
    found = {way: [] for way in ways}
    for _ in range(rounds):
        for way, settings_dict in ways.items():
            use(settings_dict)
            found[way].append(measure())
    return {way: statistics.median(values) for way, values in found.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=5.0, help="Length of each throughput run.")
    parser.add_argument("--procs", default="1,4,16", help="Comma-separated process counts.")
    parser.add_argument("--pool-size", type=int, default=20, help="PgBouncer's server connections.")
    parser.add_argument("--pick-pairs", type=int, default=2000, help="Pairs timed from one process each way.")
    parser.add_argument("--rounds", type=int, default=1, help="Rounds per figure; the median is printed.")
    add_json_option(parser)
    args = parser.parse_args()
    procs = [int(p) for p in args.procs.split(",")]

    direct = copy.deepcopy(connection.settings_dict)
    server = connection.cursor().connection.info.server_version
    pool = ensure_pool("bench-10k", SMALL)
    database_url = (f"postgresql://{direct['USER']}@{direct['HOST'] or '127.0.0.1'}:{direct['PORT'] or 5432}"
                    f"/{direct['NAME']}")
    with transaction_pooler(database_url, pool_size=args.pool_size) as url:
        ways = {"direct": direct, "direct, pooler settings": pooler_settings(direct),
                "pgbouncer": pooler_settings(direct, url)}
        print(f"database: PostgreSQL {server}; pgbouncer in transaction mode, {args.pool_size} server connections")
        print(f"\nclaim+release pairs/s through the services, pool of {SMALL:,}, {args.seconds:g} s per run, "
              f"median of {args.rounds}")
        print(f"{'procs':>5} {'direct':>8} {'direct, pooler settings':>24} {'pgbouncer':>10} "
              f"{'pgbouncer/direct':>17} {'pgbouncer/same settings':>24}")
        for n in procs:
            rates = median_of(args.rounds, ways, lambda: throughput("services", pool.pk, n, args.seconds))
            print(f"{n:>5} {rates['direct']:>8.0f} {rates['direct, pooler settings']:>24.0f} "
                  f"{rates['pgbouncer']:>10.0f} {rates['pgbouncer'] / rates['direct']:>17.2f} "
                  f"{rates['pgbouncer'] / rates['direct, pooler settings']:>24.2f}", flush=True)
            figure(f"claim+release through PgBouncer, {n} process(es)", rates["pgbouncer"], "pairs/s",
                   baseline=rates["direct"], baseline_name="straight to PostgreSQL")

        print(f"\ntime per claim+release, 1 process, {args.pick_pairs} pairs, median of {args.rounds}")
        times = median_of(args.rounds, ways, lambda: time_per_claim(pool, args.pick_pairs))
        for way, seconds in times.items():
            print(f"  {way:<24} {seconds * 1000:.3f} ms  ratio to direct {seconds / times['direct']:.2f}")
        figure("time per claim+release through PgBouncer, 1 process", times["pgbouncer"] * 1000, "ms",
               baseline=times["direct"] * 1000, baseline_name="straight to PostgreSQL")
        use(direct)
    write_figures(args.json, seconds=args.seconds, procs=procs, pool_size=args.pool_size, rounds=args.rounds)


if __name__ == "__main__":
    main()
