"""Task throughput beside plain RQ, and the lateness of scheduled retries.

    .venv/bin/python bench/flows.py [--tasks 5000] [--workers 2] [--retries 200]

1. Throughput: N tasks with the no-op flow through W SimpleWorkers, beside plain RQ running N
   no-op jobs through W SimpleWorkers in the same run; each timed from the first job's start to
   the last one's end (worker start-up excluded), with the ratio. A task does real database work
   (claim, attempt row, release, timeline); a plain RQ job does none.
2. Lateness: R tasks whose first attempt fails retryably with a 3 s fixed backoff, run by W
   workers of the class production runs (django-rq's WORKER_CLASS, retryops.worker.Worker, whose
   scheduler moves due wake-ups); lateness = the retry's actual start minus its next_run_at, both
   on PostgreSQL's clock, p50 / p99 / max, and how many started early (must be none). Twice: on
   an otherwise idle queue, and under bursts of B new no-op tasks started at once every two
   seconds while the retries are in flight (retries must not wait behind them).
Runs in a database of its own beside the app's (`retryops_bench`, see bench/common.py; pools
named bench-flows-*) and in its own Redis database (14).
"""

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from common import add_json_option, figure, setup_django, write_figures  # noqa: E402

setup_django()

import django_rq  # noqa: E402
from django.conf import settings  # noqa: E402
from django.db.models import Max, Min  # noqa: E402

import resources.services  # noqa: E402
from resources.models import ResourcePool  # noqa: E402
from scheduling import services  # noqa: E402
from scheduling.models import Attempt, RetryPolicy, Task  # noqa: E402
from scheduling.queueing import WORKER_QUEUES  # noqa: E402

BENCH_REDIS_DB = 14


def bench_redis_url() -> str:
    url = settings.REDIS_URL
    if url.startswith("unix://"):
        return f"{url.split('?')[0]}?db={BENCH_REDIS_DB}"
    return f"{url.rsplit('/', 1)[0] if url.count('/') > 2 else url}/{BENCH_REDIS_DB}"


def start_workers(count: int, *queues: str, burst: bool = True, scheduler: bool = False,
                  worker_class: str | None = "rq.worker.SimpleWorker") -> list[subprocess.Popen]:
    """`count` rqworkers; worker_class None is production's (django-rq's WORKER_CLASS)."""
    cmd = [sys.executable, str(ROOT / "manage.py"), "rqworker", *queues, "--verbosity", "0"]
    cmd += ["--worker-class", worker_class] if worker_class else []
    cmd += ["--burst"] if burst else []
    cmd += ["--with-scheduler"] if scheduler else []
    env = {**os.environ, "REDIS_URL": bench_redis_url()}
    return [subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for _ in range(count)]


def fresh_pool(name: str, size: int, lease_seconds: int = 300) -> ResourcePool:
    ResourcePool.objects.filter(name=name).update(name=f"{name}-old-{time.time_ns()}")
    pool = resources.services.create_pool(name=name, lease_seconds=lease_seconds)
    resources.services.add_resources(pool=pool, resources=[{"key": f"r{n}"} for n in range(size)])
    return pool


def plain_rq(jobs: int, workers: int) -> float:
    queue = django_rq.get_queue("default")
    queue.empty()
    enqueued = []
    for _ in range(jobs):
        enqueued.append(queue.enqueue("os.getpid", result_ttl=600))
    for worker in start_workers(workers, "default"):
        worker.wait()
    fetched = [j for j in queue.job_class.fetch_many([j.id for j in enqueued], connection=queue.connection) if j]
    finished = [j for j in fetched if j.get_status() == "finished"]
    assert len(finished) == jobs, f"plain RQ finished {len(finished)} of {jobs} jobs ({len(fetched)} found)"
    span = max(j.ended_at for j in fetched) - min(j.started_at for j in fetched)
    return jobs / span.total_seconds()


def task_throughput(tasks: int, workers: int) -> float:
    pool = fresh_pool("bench-flows-throughput", 200)
    ids = [services.start_task(flow="noop", pool_name=pool, created_by="bench", policy="bench-instant").pk
           for _ in range(tasks)]
    for worker in start_workers(workers, "flows"):
        worker.wait()
    done = Task.objects.filter(pk__in=ids, state="succeeded").count()
    assert done == tasks, f"only {done} of {tasks} tasks succeeded"
    span = Attempt.objects.filter(task_id__in=ids).aggregate(first=Min("started_at"), last=Max("task__finished_at"))
    return tasks / (span["last"] - span["first"]).total_seconds()


def retry_lateness(retries: int, workers: int, *, burst: int = 0) -> list[float]:
    """Lateness of `retries` scheduled retries; with `burst`, that many new tasks are started at
    once every two seconds until the retries are done, so fresh work is queued when they come due."""
    pool = fresh_pool("bench-flows-retries", retries)
    burst_pool = fresh_pool("bench-flows-burst", max(burst, 1))
    running = start_workers(workers, *WORKER_QUEUES, burst=False, scheduler=True, worker_class=None)
    next_burst = time.monotonic()

    def maybe_burst():
        nonlocal next_burst
        if burst and time.monotonic() >= next_burst:
            for _ in range(burst):
                services.start_task(flow="noop", pool_name=burst_pool, created_by="bench", policy="bench-instant")
            next_burst = time.monotonic() + 2

    try:
        ids = []
        for n in range(retries):  # spread the retries over about ten seconds
            ids.append(services.start_task(flow="demo", pool_name=pool, created_by="bench", policy="bench-retry",
                                           payload={"script": ["TimeoutError: bench", "ok"]}).pk)
            maybe_burst()
            time.sleep(10 / retries)
        deadline = time.monotonic() + 120
        while Task.objects.filter(pk__in=ids, state="succeeded").count() < retries:
            if time.monotonic() > deadline:
                raise SystemExit("retries did not all finish within 120 s")
            maybe_burst()
            time.sleep(0.1)
    finally:
        for worker in running:
            worker.terminate()
        for worker in running:
            worker.wait()
    # Both times on PostgreSQL's clock: started_at is now() of the attempt's start, scheduled_for
    # its next_run_at, computed from now() when the first attempt failed.
    second = Attempt.objects.filter(task_id__in=ids, number=2)
    return sorted((a.started_at - a.scheduled_for).total_seconds() for a in second)


def print_lateness(late: list[float], label: str) -> tuple[float, int]:
    """Print the lateness's quantiles and the early starts; returns the p99 and the early count."""
    p = lambda q: late[min(len(late) - 1, int(q * len(late)))]  # noqa: E731
    early = sum(1 for seconds in late if seconds < 0)
    print(f"  {label:<24} p50 {p(0.50):.3f} s   p99 {p(0.99):.3f} s   max {late[-1]:.3f} s   min {late[0]:.3f} s"
          f"   early starts {early}")
    return p(0.99), early


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=5000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--retries", type=int, default=200)
    parser.add_argument("--burst", type=int, default=100,
                        help="New tasks started at once every two seconds while retries are in flight.")
    parser.add_argument("--rounds", type=int, default=3,
                        help="Alternate plain RQ and tasks this many times; the median ratio is the figure.")
    add_json_option(parser)
    args = parser.parse_args()

    for config in settings.RQ_QUEUES.values():
        config["URL"] = bench_redis_url()
    django_rq.get_connection("flows").flushdb()
    RetryPolicy.objects.update_or_create(name="bench-instant", defaults=dict(
        max_attempts=1, backoff="fixed", initial_delay_seconds=0, max_delay_seconds=0))
    RetryPolicy.objects.update_or_create(name="bench-retry", defaults=dict(
        max_attempts=2, backoff="fixed", initial_delay_seconds=3, max_delay_seconds=3))

    print(f"{args.tasks} jobs per run, {args.workers} SimpleWorkers, {os.cpu_count()} cores, "
          f"{args.rounds} alternating rounds (this machine is noisy: the median ratio is the figure)")
    ratios, rounds = [], []
    for n in range(1, args.rounds + 1):
        plain = plain_rq(args.tasks, args.workers)
        ours = task_throughput(args.tasks, args.workers)
        ratios.append(ours / plain)
        rounds.append((ours / plain, ours, plain))
        print(f"  round {n}: plain RQ, os.getpid jobs (baseline) {plain:6.0f} jobs/s;"
              f" RetryOps tasks, no-op flow {ours:6.0f} tasks/s; ratio {ours / plain:.2f}", flush=True)
    print(f"  median ratio {statistics.median(ratios):.2f} (target >= 0.55)")
    _, ours, plain = sorted(rounds)[len(rounds) // 2]
    figure(f"no-op flow tasks, {args.workers} workers (median round of {args.rounds})", ours, "tasks/s",
           baseline=plain, baseline_name="plain RQ jobs, same workers", ratio=statistics.median(ratios),
           target="ratio >= 0.55")

    print(f"\nlateness of {args.retries} scheduled retries (start - next_run_at, PostgreSQL's clock), 3 s backoff,"
          f" {args.workers} production workers (target p99 < 0.4 s, no early start)")
    idle, idle_early = print_lateness(retry_lateness(args.retries, args.workers), "idle queue:")
    busy, busy_early = print_lateness(retry_lateness(args.retries, args.workers, burst=args.burst),
                                      f"bursts of {args.burst} new tasks:")
    figure("scheduled retries' lateness p99, idle queue", idle, "s", target="< 0.4 s")
    figure(f"scheduled retries' lateness p99, bursts of {args.burst}", busy, "s", baseline=idle,
           baseline_name="idle queue", target="< 0.4 s")
    figure("scheduled retries started before their due time", idle_early + busy_early, "retries", target="0")
    write_figures(args.json, tasks=args.tasks, workers=args.workers, retries=args.retries, rounds=args.rounds)

if __name__ == "__main__":
    main()
