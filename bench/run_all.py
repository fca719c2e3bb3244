"""Rerun every benchmark docs/benchmarks.md cites and regenerate its benchmark table.

    .venv/bin/python bench/run_all.py [--quick] [--only claim,api] [--no-write] [--logs DIR]

Runs each script of SCRIPTS in turn with its own default sizes (--quick: the smaller run given
beside it, for a check of the pipeline, not for figures), each with `--json PATH`, and reads the
figures each wrote (bench/common.py's figure(): a value beside the baseline measured in the same
run, and their ratio) — never their printed text. Then it writes one table, with the machine it
ran on (cores, RAM, CPU model, PostgreSQL and Redis versions, the date, the commit) and the load
average when each script started, into docs/benchmarks.md between the `<!-- bench:begin -->` and
`<!-- bench:end -->` markers, and prints it. A script that fails or times out gets a row saying
so; the others run all the same. With --only, the table is printed, not written.

The scripts use their own databases beside the app's (bench/common.py) and a redis-server this
script starts on a free loopback port (their Redis databases 3 and 14 there, never the shared
server's). Each script's output goes to a log of its own (--logs, default a temporary folder).
Takes about an hour on 2 cores, more the first time (the million-row databases are built once
and kept).
"""

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from common import RedisServer  # noqa: E402

# The README only summarises the figures; the generated table lives with the benchmarks' sections.
TABLE_PAGE = ROOT / "docs" / "benchmarks.md"
BEGIN, END = "<!-- bench:begin -->", "<!-- bench:end -->"
# (script, --quick arguments): each runs with its own defaults unless --quick.
SCRIPTS = (
    ("claim.py", ["--seconds", "2", "--procs", "1,4", "--pick-pairs", "500"]),
    ("pgbouncer.py", ["--seconds", "2", "--procs", "1,4", "--pick-pairs", "500"]),
    ("flows.py", ["--tasks", "1000", "--retries", "50", "--rounds", "1"]),
    ("dlq_cleanup.py", ["--rows", "20000"]),
    ("dead_letter_latency.py", ["--deaths", "40", "--spread", "4"]),
    ("api.py", ["--seconds", "3"]),
    ("admin.py", ["--sizes", "1000,10000", "--repeat", "5"]),
    ("metrics.py", ["--sizes", "1000,10000", "--repeat", "5", "--new-events", "1000"]),  # with whatif.py
    ("figures.py", ["--sizes", "1000,10000", "--repeat", "5"]),
    ("transience.py", ["--sizes", "10000,100000", "--repeat", "3"]),
    ("invariants.py", ["--sizes", "1000,10000", "--repeat", "5"]),
)
TIMEOUT = 3 * 3600  # a first run builds million-row databases


def machine(redis_url: str) -> dict:
    """What the table says the figures were measured on."""
    import psycopg
    from redis import Redis

    sys.path.insert(0, str(ROOT))
    from retryops import devservices

    memory = next(line for line in Path("/proc/meminfo").read_text().splitlines() if line.startswith("MemTotal"))
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor() or platform.machine())
    server = psycopg.conninfo.make_conninfo(devservices.database_url(create=False), dbname="postgres")
    with psycopg.connect(server, connect_timeout=5) as conn:
        postgres = conn.execute("SHOW server_version").fetchone()[0]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    return {"cores": os.cpu_count(), "ram_gib": int(memory.split()[1]) / 2**20, "cpu": cpu,
            "postgres": postgres.split()[0], "redis": Redis.from_url(redis_url).info("server")["redis_version"],
            "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"), "commit": commit,
            "load_start": os.getloadavg()}


def run(script: str, args: list[str], logs: Path, env: dict) -> dict:
    """One benchmark, its figures read from its --json file: {"script", "load", "seconds",
    "figures"} or, when it failed, "error" instead of figures."""
    out = logs / f"{script.removesuffix('.py')}.json"
    out.unlink(missing_ok=True)
    load, began = os.getloadavg()[0], time.monotonic()
    print(f"{script} {' '.join(args)} (load average {load:.1f}) ...", flush=True)
    with open(logs / f"{script.removesuffix('.py')}.log", "w") as log:
        try:
            done = subprocess.run([sys.executable, str(ROOT / "bench" / script), *args, "--json", str(out)],
                                  cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=TIMEOUT)
            error = "" if done.returncode == 0 else f"exit status {done.returncode}"
        except subprocess.TimeoutExpired:
            error = f"timed out after {TIMEOUT} s"
    seconds = time.monotonic() - began
    if not error and not out.exists():
        error = "wrote no figures"
    if error:
        tail = (logs / f"{script.removesuffix('.py')}.log").read_text().strip().splitlines()[-1:] or [""]
        print(f"  failed ({error}): {tail[0][:200]}", flush=True)
        return {"script": script, "load": load, "seconds": seconds, "error": f"{error}: {tail[0][:200]}"}
    print(f"  {seconds:.0f} s", flush=True)
    return {"script": script, "load": load, "seconds": seconds, "figures": json.loads(out.read_text())["figures"]}


def number(value: float | None) -> str:
    if value is None:
        return ""
    if isinstance(value, int) or value == 0:
        return f"{value:,}"
    magnitude = abs(value)
    return f"{value:,.0f}" if magnitude >= 100 else f"{value:.1f}" if magnitude >= 10 else f"{value:.2f}" \
        if magnitude >= 0.1 else f"{value:.3f}"


def table(about: dict, runs: list[dict], quick: bool) -> str:
    load_end = os.getloadavg()
    lines = [
        f"Generated by `bench/run_all.py`{' --quick (smaller sizes: a check, not figures)' if quick else ''} on "
        f"{about['date']} at commit {about['commit']}: {about['cores']} cores ({about['cpu']}), "
        f"{about['ram_gib']:.0f} GiB RAM, PostgreSQL {about['postgres']}, Redis {about['redis']}. Load average "
        f"{about['load_start'][0]:.1f} (1 min) / {about['load_start'][1]:.1f} (5 min) at the start, "
        f"{load_end[0]:.1f} / {load_end[1]:.1f} at the end; the machine is shared, so the column *load* gives "
        "the 1-minute load average when each script started. Each figure is beside its baseline measured in the "
        "same run; ratio = figure / baseline (a median of ratios where the script says so).",
        "",
        "| benchmark | figure | value | baseline, same run | ratio | target | load |",
        "|---|---|---|---|---|---|---|",
    ]
    for done in runs:
        script = f"`bench/{done['script']}`"
        if "error" in done:
            lines.append(f"| {script} | failed: {done['error'].replace('|', '/')} | | | | | {done['load']:.1f} |")
            continue
        for f in done["figures"]:
            baseline = (f"{number(f['baseline'])} {f['unit']} ({f['baseline_name']})"
                        if f["baseline"] is not None else "—")
            ratio = f"{f['ratio']:.2f}" if f["ratio"] is not None else "—"
            lines.append(f"| {script} | {f['name']} | {number(f['value'])} {f['unit']} | {baseline} | {ratio} | "
                         f"{f['target']} | {done['load']:.1f} |")
    return "\n".join(lines)


def write_table_page(text: str) -> None:
    page = TABLE_PAGE.read_text()
    if page.count(BEGIN) != 1 or page.count(END) != 1 or page.index(BEGIN) > page.index(END):
        raise SystemExit(f"{TABLE_PAGE.relative_to(ROOT)} needs one {BEGIN} line followed by one {END} line: "
                         "the table goes between them")
    head, rest = page.split(BEGIN)
    _, tail = rest.split(END)
    TABLE_PAGE.write_text(f"{head}{BEGIN}\n{text}\n{END}{tail}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="Smaller sizes: checks the pipeline, not the figures.")
    parser.add_argument("--only", default="", help="Comma-separated script names (claim,api): print, don't write.")
    parser.add_argument("--no-write", "--no-readme", dest="no_write", action="store_true",
                        help="Print the table only.")
    parser.add_argument("--logs", help="Folder for each script's output and figures (default: a temporary one).")
    args = parser.parse_args()
    only = {name.strip().removesuffix(".py") for name in args.only.split(",") if name.strip()}
    unknown = only - {script.removesuffix(".py") for script, _ in SCRIPTS}
    if unknown:
        parser.error(f"unknown benchmark(s) {', '.join(sorted(unknown))}; known: "
                     + ", ".join(script.removesuffix(".py") for script, _ in SCRIPTS))
    logs = Path(args.logs or tempfile.mkdtemp(prefix="retryops-bench-"))
    logs.mkdir(parents=True, exist_ok=True)

    redis = RedisServer(logs)
    redis.start()
    env = {**os.environ, "REDIS_URL": redis.url}
    try:
        about = machine(redis.url)
        print(f"logs and figures in {logs}; Redis {redis.url}", flush=True)
        runs = [run(script, quick if args.quick else [], logs, env) for script, quick in SCRIPTS
                if not only or script.removesuffix(".py") in only]
    finally:
        redis.stop()
    text = table(about, runs, args.quick)
    (logs / "table.md").write_text(text + "\n")
    print("\n" + text)
    if not only and not args.no_write:
        write_table_page(text)
        print(f"\n{TABLE_PAGE.relative_to(ROOT)}: the table between {BEGIN} and {END} regenerated")
    sys.exit(1 if any("error" in done for done in runs) else 0)


if __name__ == "__main__":
    main()
