"""Set-up shared by the benchmarks: Django on a database of their own, never the app's.

The benchmark database sits on the server the app uses (DATABASE_URL, else the local or the
embedded PostgreSQL), is named after the app's with `_bench` added (`retryops_bench`), and is
created and migrated here. It is kept between runs, so the million-row pool is built once;
`DROP DATABASE retryops_bench` removes it.
"""

import os
import sys
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parents[1]


def bench_database_url(app_url: str, suffix: str = "_bench") -> str:
    """The URL of the benchmark database beside the app's database at `app_url`; a benchmark
    that empties tables others keep passes its own `suffix` (`_bench_dlq`)."""
    parts = urlsplit(app_url)
    name = parts.path.lstrip("/") or "retryops"
    return urlunsplit(parts._replace(path=f"/{name}{suffix}"))


def setup_django(suffix: str = "_bench") -> None:
    """Point Django at the benchmark database (the app's name + `suffix`), create and migrate it,
    then set Django up, with DEBUG off whatever the environment says (DEBUG keeps every query)."""
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "retryops.settings")
    from retryops import devservices

    url = bench_database_url(devservices.database_url(create=False), suffix)
    devservices.ensure_database(url)
    # Worker processes a benchmark starts inherit it from here.
    os.environ["DATABASE_URL"] = url

    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", interactive=False, verbosity=0)
    from django.conf import settings

    settings.DEBUG = False


def superuser_client(username: str):
    """A Django test Client logged in as a superuser, for timing admin pages in-process. Not
    setup_test_environment(): it instruments every template render."""
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.test import Client

    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "testserver"]
    user, _ = get_user_model().objects.get_or_create(username=username, defaults={
        "is_staff": True, "is_superuser": True})
    client = Client()
    client.force_login(user)
    return client


def time_pages(client, pages: list[tuple[str, str]], repeat: int) -> list[dict]:
    """Server time per request (ms, p50 and p95) and queries per request of each (label, url),
    after one warm-up request (connections, templates, caches)."""
    import statistics
    import time

    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    rows = []
    for label, url in pages:
        assert client.get(url).status_code == 200, url
        times, queries = [], 0
        for _ in range(repeat):
            with CaptureQueriesContext(connection) as captured:
                started = time.perf_counter()
                response = client.get(url)
                times.append((time.perf_counter() - started) * 1000)
            assert response.status_code == 200, (url, response.status_code)
            queries = len(captured.captured_queries)
        times.sort()
        rows.append({"page": label, "p50": statistics.median(times),
                     "p95": times[max(0, round(0.95 * len(times)) - 1)], "queries": queries})
    return rows


def timed(label: str, call, repeat: int) -> dict:
    """Time `call()` `repeat` times after one warm-up call, in the shape of time_pages' rows: ms
    per call, p50 and p95, and the queries of one call."""
    import statistics
    import time

    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    call()
    times = []
    for _ in range(repeat):
        with CaptureQueriesContext(connection) as captured:
            started = time.perf_counter()
            call()
            times.append((time.perf_counter() - started) * 1000)
    times.sort()
    return {"page": label, "p50": statistics.median(times), "p95": times[max(0, round(0.95 * len(times)) - 1)],
            "queries": len(captured.captured_queries)}


def first_rollup_pass(timeout: float = 1800) -> dict:
    """The rollups of attempts' first pass (scheduling.services.rollups), as the ops process runs it
    once, timed ({"p50", "p95", "queries"}: one run, ms), after every transaction on the server that
    began before it has ended: until then the pass cannot move its mark past the rows just built,
    and every read would count its whole window from the rows."""
    import time

    from django.db import connection

    from scheduling.models import AttemptRollupMark
    from scheduling.services.rollups import roll_up_attempts

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_current_xact_id()::text")
        written, deadline, said = int(cursor.fetchone()[0]), time.monotonic() + timeout, False
        while True:
            cursor.execute("SELECT pg_snapshot_xmin(pg_current_snapshot())::text")
            if int(cursor.fetchone()[0]) > written:
                break
            if time.monotonic() > deadline:
                raise SystemExit("a transaction open on the server holds the rollups back; run again when it has ended")
            if not said:
                print("  waiting for the transactions open on the server to end ...", file=sys.stderr, flush=True)
                said = True
            time.sleep(1)
    AttemptRollupMark.objects.all().delete()
    started = time.perf_counter()
    roll_up_attempts()
    ms = (time.perf_counter() - started) * 1000
    return {"p50": ms, "p95": ms, "queries": 0}


def page_sizes_in_children(script: str, sizes: list[int], args: list[str]) -> dict[int, dict[str, dict]]:
    """Run `script --child SIZE ARGS` per size, each in a fresh process (its own database and
    caches), and read the time_pages rows it prints last, by page label."""
    import json
    import subprocess

    results = {}
    for size in sizes:
        out = subprocess.run([sys.executable, script, "--child", str(size), *args], check=True,
                             stdout=subprocess.PIPE, text=True).stdout
        results[size] = {row["page"]: row for row in json.loads(out.strip().splitlines()[-1])}
    return results


def sizes_in_children(script: str, doc: str, child, *, repeat: int, repeat_help: str) -> tuple:
    """The command line of a benchmark that measures each of `--sizes` in a child process of its
    own (`--repeat`, `--json`): in a child, `child(size, repeat)` and exit; else (the arguments,
    the sizes, and page_sizes_in_children's results)."""
    import argparse

    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1000,1000000", help="Comma-separated numbers of attempts.")
    parser.add_argument("--repeat", type=int, default=repeat, help=repeat_help)
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    add_json_option(parser)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.repeat)
        raise SystemExit(0)
    sizes = [int(s) for s in args.sizes.split(",")]
    return args, sizes, page_sizes_in_children(script, sizes, ["--repeat", str(args.repeat)])


def print_page_table(results: dict[int, dict[str, dict]], labels: list[str], noun: str, target_p95_ms: float) -> None:
    """The time_pages rows of every size side by side, and the worst p95 beside the target."""
    sizes = list(results)
    width = max(len(label) for label in labels) + 2
    print(f"{'page':{width}}" + "".join(f"{f'{s:,} {noun}':>28}" for s in sizes))
    print(f"{'':{width}}" + "".join(f"{'p50':>10}{'p95':>10}{'queries':>8}" for _ in sizes))
    worst = 0.0
    for label in labels:
        line = f"{label:{width}}"
        for size in sizes:
            row = results[size][label]
            worst = max(worst, row["p95"])
            line += f"{row['p50']:>10.1f}{row['p95']:>10.1f}{row['queries']:>8}"
        print(line)
        if len(sizes) > 1:
            small, large = results[sizes[0]][label], results[sizes[-1]][label]
            figure(f"{label}, p95 at {sizes[-1]:,} {noun}", large["p95"], "ms", baseline=small["p95"],
                   baseline_name=f"{sizes[0]:,} {noun}", target=f"< {target_p95_ms} ms")
    print(f"worst p95 {worst:.1f} ms (target < {target_p95_ms} ms)")


# Figures for bench/run_all.py: each benchmark keeps what it prints as figures too, each beside
# the baseline measured in the same run, and writes them with --json PATH. run_all reads these
# files, never the human text, which is free to change.
FIGURES: list[dict] = []


def add_json_option(parser) -> None:
    """The --json PATH option every benchmark takes (bench/run_all.py passes it)."""
    parser.add_argument("--json", metavar="PATH", help="Also write the figures as JSON to PATH (bench/run_all.py).")


def figure(name: str, value: float, unit: str, *, baseline: float | None = None, baseline_name: str = "",
           ratio: float | None = None, target: str = "") -> None:
    """Keep one figure: `value` in `unit`, beside `baseline` (what `baseline_name` measured in the
    same run, same unit); the ratio is value / baseline unless given (a median of ratios, say)."""
    if ratio is None and baseline:
        ratio = value / baseline
    FIGURES.append({"name": name, "value": value, "unit": unit, "baseline": baseline,
                    "baseline_name": baseline_name, "ratio": ratio, "target": target})


def write_figures(path: str | None, **about) -> None:
    """Write the kept figures (and `about`: sizes, settings of the run) to `path`, if given."""
    import json

    if path:
        Path(path).write_text(json.dumps({"figures": FIGURES, **about}, indent=1, default=str))


def read_figures(path: str) -> list[dict]:
    """The figures another benchmark's --json wrote, to keep beside this one's (bench/metrics.py
    runs bench/whatif.py)."""
    import json

    return json.loads(Path(path).read_text())["figures"]


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def gunicorn(workers: int, threads: int | None, env: dict, log=None, deployed: bool = False) -> tuple:
    """The app under gunicorn on a free loopback port, `env` its environment (the database and
    Redis of the benchmark), its stderr to the file `log` if given (a long run must not fill a
    pipe nobody reads): (the process, its base URL) once /readyz answers. `deployed`: with
    deploy/gunicorn.conf.py (its worker, its threads unless `threads` says, its JSON access line)."""
    import subprocess
    import time

    import httpx

    port = free_port()
    if deployed:
        command = ["--config", "deploy/gunicorn.conf.py", "retryops.wsgi:application"]
        env = {**env, "WEB_CONCURRENCY": str(workers),
               "GUNICORN_CMD_ARGS": f"--bind 127.0.0.1:{port}" + (f" --threads {threads}" if threads else "")}
    else:
        command = ["retryops.wsgi:application", "--bind", f"127.0.0.1:{port}", "--workers", str(workers),
                   "--threads", str(threads), "--worker-class", "gthread", "--log-level", "warning"]
    server = subprocess.Popen([sys.executable, "-m", "gunicorn", *command], cwd=ROOT, env=env,
                              stdout=subprocess.DEVNULL, stderr=log or subprocess.PIPE, text=True)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(f"{base}/readyz", timeout=2).status_code == 200:
                return server, base
        except httpx.TransportError:
            pass
        if server.poll() is not None or time.monotonic() > deadline:
            said = server.stderr.read() if server.poll() is not None and server.stderr else ""
            raise SystemExit(f"gunicorn did not start: {said}")
        time.sleep(0.2)


def percentile(values: list[float], q: float) -> float:
    """The q-quantile of `values` (nearest rank); 0.0 of none."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


class RedisServer:
    """A redis-server of a benchmark's own on a free loopback port, its files and log in `folder`;
    append-only (`append_only`) survives a restart as deploy/compose.yaml's does, else nothing is
    kept. Never the shared server: a benchmark may flush or restart it."""

    def __init__(self, folder: Path, *, append_only: bool = False):
        self.folder, self.append_only, self.process = folder, append_only, None
        self.port = free_port()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        import shutil
        import subprocess
        import time

        from redis import Redis

        self.process = subprocess.Popen(
            [shutil.which("redis-server"), "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.folder),
             "--appendonly", "yes" if self.append_only else "no", "--save", "", "--maxmemory-policy", "noeviction"],
            stdout=open(self.folder / "redis.log", "a"), stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                if Redis.from_url(self.url, socket_timeout=0.5).ping():
                    return
            except Exception:
                time.sleep(0.05)
        raise SystemExit(f"redis-server did not answer on port {self.port}: see {self.folder / 'redis.log'}")

    def stop(self) -> None:
        self.process.terminate()  # a clean shutdown: the append-only file is flushed
        self.process.wait(timeout=30)
