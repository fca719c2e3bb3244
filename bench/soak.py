"""A bounded soak: minutes of mixed load on the app as deployed, Redis restarted in the middle,
then the invariant check. Not part of CI.

    .venv/bin/python bench/soak.py [--minutes 10] [--rate 10] [--clients 6] [--flow-workers 2]
                                   [--batch-tasks 10] [--batch-interval 5] [--redis-down 5] [--settle 300]
                                   [--ops-processes 2] [--kill-ops-leader]

What runs, each as deploy/Procfile runs it (the command lines come from `manage.py up`'s own list):
  web        gunicorn, 2 workers x 4 threads, on a free loopback port;
  workers    --flow-workers `rqworker retries flows default --with-scheduler` (as if on as many
             hosts) and --ops-processes `ops` (one leads); a process that exits is started again
             after a second, as compose's `restart: unless-stopped` does, and counted. With
             --kill-ops-leader the leading ops process gets SIGKILL at three quarters of the load;
             bench/ops_handover.py tables the ops processes' step runs and the handover;
  Redis      a redis-server of its own on a free loopback port, append-only as in
             deploy/compose.yaml (never the shared one); at half time it is stopped (SIGTERM), left
             down --redis-down seconds, and started again on the same port and file;
  database   `<app>_bench_soak` beside the app's (bench/common.py), dropped and created afresh at
             each start, kept afterwards to be looked at;
  upstream   a local HTTP server (a thread here) that the http_call flow posts to, answering with
             a realistic mix (UPSTREAM_MIX: mostly 200, some 503/500/429, timeouts, a few 401s),
             and counting each Idempotency-Key (task and attempt) it is sent.
The batch config soak-flows starts --batch-tasks http_call tasks on pool soak-flows every
--batch-interval seconds with retry_failed_first on, under the `fast` policy (3 attempts, backoff
from 2 s). The load: --rate operations a second in all (open loop: each operation has its start
time; one that starts late counts its lag), shared by --clients threads, in the mix of OPERATIONS:
API claims and releases on pool soak-api (a tenth of the releases a retryable failure; failed
resources are claimed again by name), API retries of failed resources of the flow pool, retry
histories, and admin pages in a logged-in session.

After the load: the batch config is disabled, every task is waited for until it has finished
(--settle seconds at most), then the invariant check (telemetry.health.invariants, deep). Prints the
throughput, error counts by kind and p50 / p99 latency per operation, the tasks by final state
(lost: not finished after the settle), the upstream's answers and repeated keys, the restarts,
and the invariant result; exits 1 when an invariant fails or a task is lost.
"""

import argparse
import collections
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
import ops_handover  # noqa: E402
from common import (  # noqa: E402
    RedisServer,
    add_json_option,
    bench_database_url,
    figure,
    gunicorn,
    percentile,
    setup_django,
    write_figures,
)

SUFFIX = "_bench_soak"
API_POOL, FLOW_POOL = "soak-api", "soak-flows"
API_RESOURCES, FLOW_RESOURCES = 300, 300
HTTP_CALL_TIMEOUT = 2  # seconds, as bench/settings.py sets it; the upstream's timeouts sleep past it
# The upstream's answers, in percent: (share, status or "timeout").
UPSTREAM_MIX = ((80, 200), (6, 503), (3, 500), (3, 429), (5, "timeout"), (3, 401))
# The driver's operations, in percent of --rate.
OPERATIONS = (("claim", 35), ("reclaim failed", 10), ("retry", 20), ("history", 10), ("admin page", 25))
ADMIN_PAGES = ("/admin/", "/admin/resources/resource/", "/admin/resources/resource/?state__exact=failed",
               "/admin/scheduling/task/", "/admin/scheduling/attempt/", "/admin/compensation/deadletter/",
               "/admin/compensation/workorder/", "/admin/dashboard/")
TERMINAL = ("succeeded", "dead", "cancelled")


# The upstream: a thread of this process, so its counts are read directly.

class Upstream(BaseHTTPRequestHandler):
    answers: collections.Counter = collections.Counter()
    keys: collections.Counter = collections.Counter()
    lock = threading.Lock()
    rng = random.Random(7)

    def do_POST(self):  # noqa: N802 (http.server's name)
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        with self.lock:
            self.keys[self.headers.get("Idempotency-Key", "")] += 1
            roll, answer = self.rng.uniform(0, 100), 200
            for share, answer in UPSTREAM_MIX:
                roll -= share
                if roll < 0:
                    break
            self.answers[answer] += 1
        if answer == "timeout":
            time.sleep(HTTP_CALL_TIMEOUT + 1)
            answer = 504  # to a client that is long gone
        else:
            time.sleep(self.rng.uniform(0.01, 0.08))
        body = json.dumps({"ok": answer == 200}).encode()
        try:
            self.send_response(answer)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def log_message(self, *args):
        pass


def start_upstream() -> str:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}/call"


# The processes of a deployment, started again when they exit.

class Deployment:
    def __init__(self, commands: dict[str, tuple[list[str], dict]], logs: Path):
        from retryops.processes import die_with_parent

        self.commands, self.logs, self.preexec = commands, logs, die_with_parent()
        self.running: dict[str, subprocess.Popen] = {}
        self.restarts: collections.Counter = collections.Counter()
        self.exits: dict[str, float] = {}

    def start(self, name: str) -> None:
        command, env = self.commands[name]
        log = open(self.logs / f"{name.replace(' ', '-')}.log", "a")
        self.running[name] = subprocess.Popen(command, env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                              preexec_fn=self.preexec)

    def start_all(self) -> None:
        for name in self.commands:
            self.start(name)

    def supervise(self) -> None:
        """Start again, a second after it exited, each process that exited (from the main thread:
        the children die with the thread that started them)."""
        now = time.monotonic()
        for name, process in self.running.items():
            if process.poll() is not None:
                exited = self.exits.setdefault(name, now)
                if now - exited >= 1.0:
                    del self.exits[name]
                    self.restarts[name] += 1
                    self.start(name)

    def stop(self) -> None:
        from retryops.processes import identity, stop

        stop([identity(p.pid) for p in self.running.values() if p.poll() is None], timeout=20)
        for process in self.running.values():
            process.poll()


# The driver: client threads sharing an open-loop schedule.

class Driver:
    def __init__(self, base: str, key: str, admin: tuple[str, str], rate: float, seconds: float,
                 flow_resources: list[int]):
        self.base, self.key, self.admin, self.rate, self.seconds = base, key, admin, rate, seconds
        self.flow_resources = flow_resources
        self.lock, self.next_slot = threading.Lock(), 0
        self.calls: list[tuple[str, float, float, str]] = []  # (operation, at s, latency ms, result)
        self.lags: list[float] = []
        kinds, weights = zip(*OPERATIONS, strict=True)
        self.plan = random.Random(11).choices(kinds, weights, k=int(rate * seconds) + 1)

    def slot(self) -> int | None:
        with self.lock:
            n, self.next_slot = self.next_slot, self.next_slot + 1
        return n if n < len(self.plan) and n / self.rate < self.seconds else None

    def run(self, number: int) -> None:
        import httpx

        api = httpx.Client(base_url=self.base, headers={"Authorization": f"Bearer {self.key}"}, timeout=30)
        admin = self.login()
        rng = random.Random(number)
        while (n := self.slot()) is not None:
            due = self.started + n / self.rate
            if (wait := due - time.monotonic()) > 0:
                time.sleep(wait)
            self.lags.append(max(0.0, time.monotonic() - due))
            operation = self.plan[n]
            try:
                getattr(self, operation.replace(" ", "_"))(api if operation != "admin page" else admin, rng, number)
            except Exception as exc:  # a bug of the driver's own, not the app's: counted, the load goes on
                self.record(operation, 0.0, f"driver {type(exc).__name__}: {exc}"[:120], time.monotonic())

    def login(self):
        import httpx

        client = httpx.Client(base_url=self.base, timeout=30)
        client.get("/admin/login/")
        answer = client.post("/admin/login/", data={
            "username": self.admin[0], "password": self.admin[1], "next": "/admin/",
            "csrfmiddlewaretoken": client.cookies["csrftoken"]}, headers={"Referer": f"{self.base}/admin/login/"})
        if answer.status_code != 302:
            raise SystemExit(f"admin login failed: HTTP {answer.status_code}")
        return client

    def record(self, operation: str, latency_ms: float, result: str, began: float) -> None:
        self.calls.append((operation, began - self.started, latency_ms, result))

    def call(self, client, operation: str, method: str, path: str, *, ok=(200, 201), **kwargs):
        """One request, recorded: its JSON answer when it succeeded, else None (409: a conflict,
        which the app answers by design; anything else an error, by status and code)."""
        import httpx

        began = time.monotonic()
        try:
            answer = client.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            self.record(operation, (time.monotonic() - began) * 1000, type(exc).__name__, began)
            return None
        latency = (time.monotonic() - began) * 1000
        if answer.status_code in ok:
            self.record(operation, latency, "ok", began)
            return answer.json() if answer.headers.get("content-type", "").startswith("application/json") else {}
        code = ""
        if answer.headers.get("content-type", "").startswith("application/json"):
            body = answer.json()
            code = body.get("code", "") if isinstance(body, dict) else ""
        self.record(operation, latency, "conflict" if answer.status_code == 409 else
                    f"HTTP {answer.status_code} {code}".strip(), began)
        return None

    def release(self, api, lease: dict, rng: random.Random) -> None:
        failed = rng.random() < 0.1
        self.call(api, "API release", "POST", f"/api/resources/{lease['id']}/release", json={
            "lease_token": lease["lease_token"], "outcome": "failure" if failed else "success",
            **({"error": "TimeoutError: read timed out after 30s"} if failed else {})})

    def claim(self, api, rng: random.Random, number: int) -> None:
        lease = self.call(api, "API claim_next", "POST", "/api/resources/claim_next",
                          json={"pool": API_POOL, "holder": f"soak client {number}"})
        if lease:
            self.release(api, lease, rng)

    def reclaim_failed(self, api, rng: random.Random, number: int) -> None:
        page = self.call(api, "API list failed (API pool)", "GET", "/api/resources/",
                         params={"pool": API_POOL, "state": "failed"})
        if page and page["results"]:
            resource = rng.choice(page["results"])
            lease = self.call(api, "API claim (failed one)", "POST", f"/api/resources/{resource['id']}/claim",
                              json={"holder": f"soak client {number}"})
            if lease:
                self.release(api, lease, rng)

    def retry(self, api, rng: random.Random, number: int) -> None:
        page = self.call(api, "API list failed (flow pool)", "GET", "/api/resources/",
                         params={"pool": FLOW_POOL, "state": "failed"})
        if page and page["results"]:
            self.call(api, "API retry", "POST", f"/api/resources/{rng.choice(page['results'])['id']}/retry", json={})

    def history(self, api, rng: random.Random, number: int) -> None:
        self.call(api, "API retry_history", "GET", f"/api/resources/{rng.choice(self.flow_resources)}/retry_history")

    def admin_page(self, admin, rng: random.Random, number: int) -> None:
        self.call(admin, "admin page", "GET", rng.choice(ADMIN_PAGES))

    def start(self, clients: int) -> list[threading.Thread]:
        self.started = time.monotonic() + 1.0  # every client logged in before the first slot
        threads = [threading.Thread(target=self.run, args=(n,), daemon=True) for n in range(clients)]
        for thread in threads:
            thread.start()
        return threads


def fresh_database() -> None:
    """Drop the soak's database, so each run checks only its own rows; setup_django creates it."""
    import psycopg
    from psycopg import sql

    from retryops import devservices

    url = bench_database_url(devservices.database_url(create=False), SUFFIX)
    name = psycopg.conninfo.conninfo_to_dict(url)["dbname"]
    with psycopg.connect(psycopg.conninfo.make_conninfo(url, dbname="postgres"), autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def prepare(args) -> dict:
    """The soak's rows: policies, an admin, an API key, the two pools, the batch config."""
    import secrets

    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    from audit.services import create_api_client
    import resources.services
    from scheduling.services.batches import save_batch_config

    call_command("load_retry_policies", only_missing=True, verbosity=0)
    password = secrets.token_urlsafe(16)
    user = get_user_model().objects.create_superuser("soak-admin", "soak@localhost", password)
    _, key = create_api_client(name="soak", user=user, actor="soak")
    resources.services.create_pool(name=API_POOL, lease_seconds=60, actor="soak")
    resources.services.add_resources(pool=API_POOL, resources=[{"key": f"a{n}"} for n in range(API_RESOURCES)],
                                     actor="soak")
    flows = resources.services.create_pool(name=FLOW_POOL, lease_seconds=60, actor="soak")
    flow_resources = resources.services.add_resources(
        pool=FLOW_POOL, resources=[{"key": f"shop{n}@example.com", "attributes": {"region": ["eu", "us"][n % 2]}}
                                   for n in range(FLOW_RESOURCES)], actor="soak")
    config = save_batch_config(data={
        "name": "soak-flows", "pool": flows, "flow": "http_call", "policy": "fast", "payload": {"order": "soak"},
        "enabled": True, "tasks_per_tick": args.batch_tasks, "retry_failed_first": True,
        "recent_window_seconds": 600}, actor="soak")
    return {"password": password, "key": key, "config": config, "flow_resources": [r.pk for r in flow_resources]}


def deployment_commands(args, env: dict) -> dict[str, tuple[list[str], dict]]:
    """manage.py up's processes, less its web server (gunicorn serves here) and its demo
    receiver, with one flow worker per --flow-workers."""
    from retryops.management.commands.up import Command

    os.environ.update(env)  # up's list takes the environment of this process
    commands = Command().child_processes("127.0.0.1:0", receiver_port=None)
    del commands["web"]
    worker = commands.pop("worker")
    ops, ops_env = commands.pop("ops")
    ops = ([*ops, "--every", f"batch_ticks={args.batch_interval}"], ops_env)
    return {**{f"worker {n + 1}": worker for n in range(args.flow_workers)},
            **{f"ops {n + 1}": ops for n in range(args.ops_processes)}, **commands}


def kill_ops_leader(deployment: Deployment, logs: Path) -> tuple[float, int] | None:
    """SIGKILL the ops process that ran the latest step: (when, its pid); None when none has."""
    pid = ops_handover.leader_pid(logs)
    if pid is None:
        return None
    os.kill(pid, signal.SIGKILL)
    print(f"  killed the leading ops process (pid {pid})", flush=True)
    return time.time(), pid


def settle(seconds: float) -> tuple[float, int]:
    """Wait until every task has finished, at most `seconds`: (the time it took, tasks unfinished)."""
    from scheduling.models import Task

    began = time.monotonic()
    while True:
        left = Task.objects.exclude(state__in=TERMINAL).count()
        if not left or time.monotonic() - began > seconds:
            return time.monotonic() - began, left
        time.sleep(1)


def report(args, driver: Driver, elapsed: float, restart_at: float, redis_down: float, deployment: Deployment,
           settled: tuple[float, int]) -> int:
    from django.db.models import Count

    from scheduling.models import Attempt, Task
    from telemetry.health.invariants import check_invariants

    print(f"\nload: {elapsed:.0f} s; Redis stopped at {restart_at:.0f} s for {redis_down:.1f} s")
    by_operation = collections.defaultdict(list)
    for operation, at, latency, result in driver.calls:
        by_operation[operation].append((at, latency, result))
    print(f"\n{'operation':26}{'calls':>8}{'per s':>8}{'ok':>8}{'409':>6}{'errors':>8}{'p50 ms':>9}{'p99 ms':>9}")
    for operation, calls in sorted(by_operation.items()):
        ok = [latency for _, latency, result in calls if result == "ok"]
        conflicts = sum(result == "conflict" for *_, result in calls)
        errors = len(calls) - len(ok) - conflicts
        print(f"{operation:26}{len(calls):>8}{len(calls) / elapsed:>8.2f}{len(ok):>8}{conflicts:>6}{errors:>8}"
              f"{percentile(ok, 0.5):>9.1f}{percentile(ok, 0.99):>9.1f}")
        figure(f"soak: {operation}, p99", percentile(ok, 0.99), "ms")
    lags = driver.lags
    print(f"operations started late against the schedule: p50 {percentile(lags, 0.5) * 1000:.0f} ms, "
          f"p99 {percentile(lags, 0.99) * 1000:.0f} ms, max {max(lags, default=0) * 1000:.0f} ms")
    window = (restart_at - 1, restart_at + redis_down + 30)
    errors = collections.Counter()
    for operation, calls in by_operation.items():
        for at, _, result in calls:
            if result not in ("ok", "conflict"):
                errors[(operation, result, window[0] <= at <= window[1])] += 1
    print("\nerrors by kind" + ("" if errors else ": none"))
    for (operation, result, near_restart), count in sorted(errors.items()):
        print(f"  {operation}: {result}: {count}" + (" (within 30 s of the Redis restart)" if near_restart else ""))

    states = dict(Task.objects.values_list("state").annotate(n=Count("id")))
    outcomes = dict(Attempt.objects.values_list("outcome").annotate(n=Count("id")))
    made_by = dict(Task.objects.values_list("created_by").annotate(n=Count("id")))
    tasks = sum(states.values())
    settle_seconds, unfinished = settled
    print(f"\ntasks: {tasks} ({made_by.get('batch soak-flows', 0)} by the batch ticks, "
          f"{tasks - made_by.get('batch soak-flows', 0)} by API retries), {tasks / elapsed * 60:.0f} a minute; "
          + ", ".join(f"{state} {n}" for state, n in sorted(states.items())))
    print(f"attempts: {sum(outcomes.values())}, {sum(outcomes.values()) / elapsed:.2f} a second; "
          + ", ".join(f"{outcome or 'running'} {n}" for outcome, n in sorted(outcomes.items(), key=str)))
    print(f"settled in {settle_seconds:.0f} s; lost (not finished after the settle): {unfinished}")
    repeated = sum(1 for key, n in Upstream.keys.items() if key and n > 1)
    print(f"upstream: {sum(Upstream.answers.values())} calls, "
          + ", ".join(f"{answer} {n}" for answer, n in sorted(Upstream.answers.items(), key=str))
          + f"; attempts it was sent more than once (same Idempotency-Key): {repeated}")
    print("process restarts: " + (", ".join(f"{name} {n}" for name, n in sorted(deployment.restarts.items()))
                                  or "none"))

    results = check_invariants(deep=True)
    violations = sum(r.count for r in results)
    print(f"\ninvariants (deep): {'ok' if not violations else f'{violations} violation(s)'}")
    for result in results:
        print(f"  {result.name}: " + ("ok" if not result.count else f"{result.count} violation(s)"))
        for violation in result.violations[:10]:
            print(f"    {violation.line()}")
    figure("soak: tasks lost", unfinished, "tasks", target="0")
    figure("soak: invariant violations", violations, "violations", target="0")
    figure("soak: tasks a minute", tasks / elapsed * 60, "tasks/min")
    return 1 if violations or unfinished else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=10.0, help="Length of the load.")
    parser.add_argument("--rate", type=float, default=10.0, help="Operations a second the clients send in all.")
    parser.add_argument("--clients", type=int, default=6, help="Client threads sharing the schedule.")
    parser.add_argument("--flow-workers", type=int, default=2, help="Flow workers (rqworker --with-scheduler).")
    parser.add_argument("--batch-tasks", type=int, default=10, help="Tasks each batch tick starts.")
    parser.add_argument("--batch-interval", type=int, default=5, help="Seconds between batch ticks.")
    parser.add_argument("--redis-down", type=float, default=5.0, help="Seconds Redis stays down at half time.")
    parser.add_argument("--settle", type=float, default=300.0, help="Seconds to wait for every task to finish.")
    parser.add_argument("--ops-processes", type=int, default=2, help="Ops processes (manage.py ops): one leads.")
    parser.add_argument("--kill-ops-leader", action="store_true",
                        help="SIGKILL the leading ops process at three quarters of the load.")
    add_json_option(parser)
    args = parser.parse_args()
    if args.minutes <= 0 or args.rate <= 0 or args.clients < 1 or args.flow_workers < 1 or args.ops_processes < 1:
        parser.error("--minutes and --rate must be positive, --clients, --flow-workers and --ops-processes at least 1")
    seconds = args.minutes * 60

    logs = Path(tempfile.mkdtemp(prefix="retryops-soak-"))
    redis = RedisServer(logs, append_only=True)  # as deploy/compose.yaml runs it
    redis.start()
    env = {"REDIS_URL": redis.url, "RETRYOPS_HTTP_CALL_URL": start_upstream(),
           "LOG_FORMAT": "text", "DJANGO_SETTINGS_MODULE": "bench.settings"}
    os.environ.update(env)
    sys.path.insert(0, str(ROOT))
    fresh_database()
    setup_django(SUFFIX)
    from django.db import connection, connections

    rows = prepare(args)
    deployment = Deployment(deployment_commands(args, env), logs)
    load = os.getloadavg()
    print(f"soak: {args.minutes:g} min at {args.rate:g} operations/s offered by {args.clients} client threads ("
          + ", ".join(f"{share}% {kind}" for kind, share in OPERATIONS) + ")")
    print(f"flows: batch soak-flows starts {args.batch_tasks} http_call tasks every {args.batch_interval} s "
          f"(retry_failed_first, policy fast), plus the API retries; upstream answers "
          + ", ".join(f"{share}% {answer}" for share, answer in UPSTREAM_MIX))
    print(f"processes: gunicorn 2x4, {', '.join(deployment.commands)}; Redis {redis.url} (append-only), "
          f"database {connection.settings_dict['NAME']}; logs in {logs}")
    print(f"machine: {os.cpu_count()} cores, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at the start",
          flush=True)
    connections.close_all()

    server, base = gunicorn(2, 4, {**os.environ, **env}, log=open(logs / "gunicorn.log", "a"))
    deployment.start_all()
    driver = Driver(base, rows["key"], ("soak-admin", rows["password"]), args.rate, seconds, rows["flow_resources"])
    restart_at, redis_down, exit_code = seconds / 2, 0.0, 1
    try:
        threads = driver.start(args.clients)
        restarted, killed = False, None
        while any(thread.is_alive() for thread in threads):
            deployment.supervise()
            if args.kill_ops_leader and killed is None and time.monotonic() - driver.started >= seconds * 0.75:
                killed = kill_ops_leader(deployment, logs)
            if not restarted and time.monotonic() - driver.started >= restart_at:
                restarted, down = True, time.monotonic()
                print(f"  {time.monotonic() - driver.started:.0f} s: stopping Redis", flush=True)
                redis.stop()
                time.sleep(args.redis_down)
                redis.start()
                redis_down = time.monotonic() - down
                print(f"  {time.monotonic() - driver.started:.0f} s: Redis is back after {redis_down:.1f} s",
                      flush=True)
            time.sleep(0.5)
        elapsed = time.monotonic() - driver.started
        print(f"  {elapsed:.0f} s: load done; {len(driver.calls)} calls; settling", flush=True)
        from scheduling.services.batches import save_batch_config

        save_batch_config(config=rows["config"], data={"enabled": False}, actor="soak")
        settle_began, settled = time.monotonic(), (0.0, 0)
        while time.monotonic() - settle_began < args.settle:
            deployment.supervise()
            settled = settle(min(5.0, args.settle))
            if not settled[1]:
                break
        settled = (time.monotonic() - settle_began, settled[1])
        # The dead letters' consumer runs on its own cadence: one more round of it.
        from compensation.jobs import DEAD_LETTERS_EVERY

        time.sleep(DEAD_LETTERS_EVERY + 2)
        exit_code = report(args, driver, elapsed, restart_at, redis_down, deployment, settled)
        if ops_handover.table(logs, cadences={"batch_ticks": args.batch_interval}, killed_at=killed and killed[0],
                              killed_pid=killed and killed[1]):
            exit_code = 1
        print(f"machine: load average {os.getloadavg()[0]:.2f} at the end")
        write_figures(args.json, minutes=args.minutes, rate=args.rate)
    finally:
        deployment.stop()
        server.terminate()
        server.wait(timeout=30)
        redis.stop()
    sys.exit(exit_code)


if __name__ == "__main__":
    main()
