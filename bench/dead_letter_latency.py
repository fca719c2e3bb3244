"""From a task's death to its work order and to the on-call's first notification, p50 / p99.

    .venv/bin/python bench/dead_letter_latency.py [--deaths 200] [--spread 10] [--workers 2]

N tasks of the demo flow fail non-retryably (each with an error signature of its own, so each
opens a work order of its own and pages), started evenly over S seconds, run by W flow
SimpleWorkers; the ops process (`manage.py ops`) runs beside them, as `manage.py up` runs it. Slack and PagerDuty point at a local HTTP receiver (a thread here) that
records when each request arrives. For each death: task.finished_at -> its dead letter is in a
work order (dead_letter.created_at), and -> the first request about that work order at the
receiver. The dead-letter step (dead_letters_job, every DEAD_LETTERS_EVERY s) is the
only path from a death to its dead letter, so a flow worker that dies right after the commit
changes nothing here. The figures are printed beside the operators' targets (p99 under 60 s; the
SLA is 5 minutes) and the step's own bound (its interval). Runs in a database of its own beside the app's
(`retryops_bench_dlq_latency`, see bench/common.py) and in its own Redis database (3).
"""

import argparse
import http.server
import os
import re
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from common import add_json_option, figure, setup_django, write_figures  # noqa: E402

# Not 15 (the test suite's default) nor 14 (bench/flows.py): a test run's flushdb would drop our jobs.
BENCH_REDIS_DB = 3
WORK_ORDER = re.compile(rb"retryops/work_order/(\d+)")


class Receiver(http.server.BaseHTTPRequestHandler):
    """Slack's webhook and PagerDuty's events endpoint: records when each request about a work order came."""

    arrivals: dict[int, datetime] = {}
    requests = 0
    lock = threading.Lock()

    def do_POST(self):
        now = datetime.now(UTC)
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        found = WORK_ORDER.search(body)
        with self.lock:
            Receiver.requests += 1
            if found:
                Receiver.arrivals.setdefault(int(found.group(1)), now)
        reply = b'{"status": "success", "message": "Event processed"}' if self.path == "/pagerduty" else b"ok"
        self.send_response(202 if self.path == "/pagerduty" else 200)
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *args):
        pass


# Before Django reads its settings: the channels point at the receiver, which must be listening.
receiver = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
threading.Thread(target=receiver.serve_forever, daemon=True).start()
RECEIVER = f"http://127.0.0.1:{receiver.server_port}"
os.environ.update(RETRYOPS_SLACK_WEBHOOK_URL=f"{RECEIVER}/slack", RETRYOPS_PAGERDUTY_URL=f"{RECEIVER}/pagerduty",
                  RETRYOPS_PAGERDUTY_ROUTING_KEY="benchbenchbenchbenchbenchbench32")
setup_django("_bench_dlq_latency")

import django_rq  # noqa: E402
from django.conf import settings  # noqa: E402

from compensation.jobs import DEAD_LETTERS_EVERY  # noqa: E402
from compensation.notifications.jobs import SEND_NOTIFICATIONS_EVERY  # noqa: E402
from compensation.models import DeadLetter  # noqa: E402
import resources.services  # noqa: E402
from resources.models import ResourcePool  # noqa: E402
from scheduling import services  # noqa: E402
from scheduling.models import RetryPolicy  # noqa: E402
from scheduling.queueing import WORKER_QUEUES  # noqa: E402

def bench_redis_url() -> str:
    url = settings.REDIS_URL
    if url.startswith("unix://"):
        return f"{url.split('?')[0]}?db={BENCH_REDIS_DB}"
    return f"{url.rsplit('/', 1)[0] if url.count('/') > 2 else url}/{BENCH_REDIS_DB}"


def start(*args: str) -> subprocess.Popen:
    env = {**os.environ, "REDIS_URL": bench_redis_url()}
    return subprocess.Popen([sys.executable, str(ROOT / "manage.py"), *args], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def word(n: int) -> str:
    """n in letters that are not hex digits, so each error keeps a signature of its own."""
    letters = "ghijklmnopqrstuvwxyz"
    out = ""
    while True:
        n, digit = divmod(n, len(letters))
        out = letters[digit] + out
        if not n:
            return out


def run(tag: str, deaths: int, spread: float, workers: int, *, timeout: float) -> tuple:
    django_rq.get_connection("flows").flushdb()
    ResourcePool.objects.filter(name="bench-dlq-latency").update(name=f"bench-dlq-latency-old-{time.time_ns()}")
    pool = resources.services.create_pool(name="bench-dlq-latency", lease_seconds=300)
    resources.services.add_resources(pool=pool, resources=[{"key": f"r{n}"} for n in range(deaths)])
    flow_worker = ["rqworker", *WORKER_QUEUES, "--worker-class", "rq.worker.SimpleWorker", "--verbosity", "0"]
    running = [start(*flow_worker) for _ in range(workers)]
    running.append(start("ops"))
    try:
        time.sleep(3)  # the workers and the ops process are up before the first death
        ids = []
        for n in range(deaths):
            error = f"PermissionError: account suspended by upstream for shop {tag} {word(n)}"
            ids.append(services.start_task(flow="demo", pool_name=pool, created_by="bench", policy="bench-dlq-latency",
                                           payload={"script": [error]}).pk)
            time.sleep(spread / deaths)
        deadline = time.monotonic() + timeout
        while True:
            letters = list(DeadLetter.objects.filter(task_id__in=ids)
                           .values_list("task__finished_at", "created_at", "work_order_id"))
            if len(letters) == deaths and all(order in Receiver.arrivals for *_, order in letters):
                break
            if any(process.poll() is not None for process in running):
                raise SystemExit(f"a worker or the ops process exited: {[p.args[-6:] for p in running]}")
            if time.monotonic() > deadline:
                paged = sum(order in Receiver.arrivals for *_, order in letters)
                raise SystemExit(f"{len(letters)} of {deaths} dead letters, {paged} paged after {timeout:.0f} s")
            time.sleep(0.2)
    finally:
        for process in running:
            process.terminate()
        for process in running:
            process.wait()
    orders = {order for *_, order in letters}
    assert len(orders) == deaths, f"{deaths} deaths grouped into {len(orders)} work orders"
    to_order = sorted((made - died).total_seconds() for died, made, _ in letters)
    to_page = sorted((Receiver.arrivals[order] - died).total_seconds() for died, _, order in letters)
    return to_order, to_page


def show(label: str, figures: list[float]) -> float:
    """Print the quantiles; returns the p99."""
    p = lambda q: figures[min(len(figures) - 1, int(q * len(figures)))]  # noqa: E731
    print(f"    {label:<30} p50 {p(0.50):6.2f} s   p99 {p(0.99):6.2f} s   max {figures[-1]:6.2f} s"
          f"   (target p99 < 60 s; SLA 300 s)")
    return p(0.99)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--deaths", type=int, default=200)
    parser.add_argument("--spread", type=float, default=10.0, help="Seconds over which the tasks are started.")
    parser.add_argument("--workers", type=int, default=2, help="Flow workers.")
    parser.add_argument("--timeout", type=float, default=300.0, help="Seconds to wait for every page.")
    add_json_option(parser)
    args = parser.parse_args()

    for config in settings.RQ_QUEUES.values():
        config["URL"] = bench_redis_url()
    RetryPolicy.objects.update_or_create(name="bench-dlq-latency", defaults=dict(
        max_attempts=3, backoff="fixed", initial_delay_seconds=0, max_delay_seconds=0))
    print(f"{args.deaths} non-retryable deaths over {args.spread:g} s, {args.workers} flow SimpleWorkers, the ops "
          f"process (dead letters every {DEAD_LETTERS_EVERY} s, notifications every {SEND_NOTIFICATIONS_EVERY} s), "
          f"{os.cpu_count()} cores")
    to_order, to_page = run(word(time.time_ns() // 1000 % 20**6), args.deaths, args.spread, args.workers,
                            timeout=args.timeout)
    print(f"  {Receiver.requests} requests received:")
    for what, times in (("death -> work order", to_order), ("death -> first notification", to_page)):
        figure(f"{what} p99", show(what, times), "s", target="< 60 s")
    print(f"  the step's own bound: a dead letter within {DEAD_LETTERS_EVERY} s of a death "
          f"plus one run of it; its pages are sent after that commit (else within "
          f"{SEND_NOTIFICATIONS_EVERY} s by the periodic send)")
    write_figures(args.json, deaths=args.deaths, spread=args.spread, workers=args.workers)


if __name__ == "__main__":
    main()
