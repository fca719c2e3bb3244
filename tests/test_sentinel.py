"""Redis Sentinel by setting alone: with REDIS_SENTINELS and REDIS_SENTINEL_MASTER (and no
REDIS_URL), the app's queues, its worker, the cache and the probes follow a failover to the replica.

A real master, its replica and three sentinels (quorum 2) on free loopback ports; the master is
killed while a worker runs, and the same worker, the same settings, run the next tasks on the new
master."""

import json
import os
import shutil
import signal
import subprocess
import time
from contextlib import ExitStack, contextmanager

import pytest
from django.core.cache import caches
from redis import Redis
from rq import Worker

from retryops import probes
from retryops.redis_servers import SentinelMaster
from scheduling import services
from scheduling.choices import TaskState
from scheduling.models import Task
from tests import servers
from tests.http_server import free_port
from tests.required import missing
from tests.startup import start_up
from tests.telemetry.processes import manage, stop, wait_for, worker_command

MASTER_NAME = "retryops"


def _redis(port: int) -> Redis:
    return Redis(host="127.0.0.1", port=port, socket_timeout=1, socket_connect_timeout=1)


def _answers(port: int) -> bool:
    try:
        return bool(_redis(port).ping())
    except Exception:
        return False


@contextmanager
def _process(command: list[str], port: int):
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: _answers(port), timeout=10, every=0.05)
        yield process
    finally:
        if process.poll() is None:
            process.terminate()
            process.wait(timeout=10)


@contextmanager
def sentinel_cluster(folder, sentinels: int = 3):
    """A master, a replica of it, and `sentinels` sentinels watching it as MASTER_NAME; yields
    (master process, master port, replica port, sentinel ports) once the sentinels know the
    replica and each other, so a failover can start as soon as the master goes."""
    server, sentinel = shutil.which("redis-server"), shutil.which("redis-sentinel")
    if not server or not sentinel:
        missing("redis-server or redis-sentinel is not installed", install="apt-get install redis-sentinel")
    master_port, replica_port = free_port(), free_port()
    # --dir: a replica writes the copy its master sends it to disk, even with nothing saved.
    plain = ["--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", str(folder)]
    with ExitStack() as stack:
        master = stack.enter_context(_process([server, "--port", str(master_port), *plain], master_port))
        stack.enter_context(_process([server, "--port", str(replica_port), *plain,
                                      "--replicaof", "127.0.0.1", str(master_port)], replica_port))
        wait_for(lambda: _redis(replica_port).info("replication")["master_link_status"] == "up", timeout=10)
        ports = []
        for n in range(sentinels):
            port = free_port()
            # A sentinel rewrites its configuration file, so each has one of its own.
            config = folder / f"sentinel-{n}.conf"
            config.write_text(f"port {port}\nbind 127.0.0.1\ndir {folder}\n"
                              f"sentinel monitor {MASTER_NAME} 127.0.0.1 {master_port} {sentinels // 2 + 1}\n"
                              f"sentinel down-after-milliseconds {MASTER_NAME} 500\n"
                              f"sentinel failover-timeout {MASTER_NAME} 3000\n")
            stack.enter_context(_process([sentinel, str(config)], port))
            ports.append(port)
        for port in ports:
            wait_for(lambda: _knows_all(port, sentinels), timeout=15, every=0.1)
        yield master, master_port, replica_port, ports


def _knows_all(port: int, sentinels: int) -> bool:
    state = _redis(port).sentinel_master(MASTER_NAME)
    return state["num-slaves"] >= 1 and state["num-other-sentinels"] >= sentinels - 1


def master_port(sentinel_port: int) -> int:
    return int(_redis(sentinel_port).sentinel_get_master_addr_by_name(MASTER_NAME)[1])


def sentinel_environment(ports: list[int]) -> dict:
    env = {key: value for key, value in os.environ.items() if key != "REDIS_URL"}
    return {**env, "DATABASE_URL": servers.database_url(),
            "REDIS_SENTINELS": ",".join(f"127.0.0.1:{port}" for port in ports),
            "REDIS_SENTINEL_MASTER": MASTER_NAME}


def test_the_sentinel_settings_put_every_queue_and_the_cache_on_the_sentinels_master():
    run = start_up("[settings.RQ_QUEUES, settings.CACHES['default']['OPTIONS']]",
                   REDIS_SENTINELS="10.0.0.5:26379,10.0.0.6:26379", REDIS_SENTINEL_MASTER="retryops",
                   REDIS_SENTINEL_MASTER_PASSWORD="pw")

    assert run.returncode == 0, run.stderr
    queues, cache = json.loads(run.stdout.splitlines()[-1])
    assert set(queues) == {"default", "flows", "retries"}
    for config in queues.values():
        assert "URL" not in config
        assert (config["SENTINELS"], config["MASTER_NAME"], config["DB"], config["PASSWORD"]) == (
            [["10.0.0.5", 26379], ["10.0.0.6", 26379]], "retryops", 0, "pw")
    assert cache["pool_class"] == "retryops.redis_servers.SentinelCachePool"


@pytest.mark.parametrize("environment, said", [
    ({"REDIS_SENTINELS": "10.0.0.5:26379"}, "REDIS_SENTINELS is set but REDIS_SENTINEL_MASTER is not"),
    ({"REDIS_SENTINELS": "10.0.0.5", "REDIS_SENTINEL_MASTER": "m"}, "REDIS_SENTINELS: '10.0.0.5' is not a host:port"),
    ({"REDIS_SENTINELS": "10.0.0.5:26379", "REDIS_SENTINEL_MASTER": "m", "REDIS_URL": "redis://127.0.0.1:6379/0"},
     "REDIS_URL and REDIS_SENTINELS are both set"),
    ({"REDIS_URL": "redis://127.0.0.1:6379/0", "REDIS_SENTINEL_MASTER": "m"},
     "REDIS_SENTINEL_MASTER is set but REDIS_SENTINELS is not"),
])
def test_a_bad_sentinel_setting_stops_start_up_naming_it(environment, said):
    run = start_up(**environment)

    assert run.returncode != 0
    assert f"ImproperlyConfigured: {said}" in run.stderr


@pytest.fixture
def sentinel_settings(settings, monkeypatch):
    """This process's settings as settings.py makes them from the sentinel variables."""

    def use(ports: list[int]):
        master = SentinelMaster(sentinels=tuple(("127.0.0.1", port) for port in ports), name=MASTER_NAME, db=0)
        settings.RQ_QUEUES = {name: {**master.rq_connection(), "DEFAULT_TIMEOUT": config["DEFAULT_TIMEOUT"]}
                              for name, config in settings.RQ_QUEUES.items()}
        settings.CACHES = {**settings.CACHES, "sentinel": {**settings.CACHES["default"], "LOCATION": "sentinel",
                                                           "OPTIONS": {"socket_timeout": 0.5,
                                                                       **master.cache_options()}}}
        probes.redis_client.cache_clear()

    yield use
    probes.redis_client.cache_clear()


def start(pool, number: int) -> Task:
    return services.start_task(flow="demo", pool_name=pool, payload={"script": ["ok"], "n": number},
                               created_by="test", policy="instant")


def succeeded(task: Task) -> bool:
    return Task.objects.get(pk=task.pk).state == TaskState.SUCCEEDED


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_worker_and_the_app_follow_a_sentinel_failover_with_no_setting_changed(tmp_path, sentinel_settings,
                                                                                 instant_policy, pool, alice,
                                                                                 admin_client):
    began = time.monotonic()
    with sentinel_cluster(tmp_path) as (master, _, replica, sentinel_ports):
        sentinel_settings(sentinel_ports)
        worker = manage(*worker_command(), env=sentinel_environment(sentinel_ports),
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            before = start(pool, 1)
            wait_for(lambda: succeeded(before), timeout=20)
            caches["sentinel"].set("before", "failover")

            master.send_signal(signal.SIGKILL)
            master.wait()
            wait_for(lambda: all(master_port(port) == replica for port in sentinel_ports), timeout=20, every=0.1)
            failed_over = time.monotonic()

            after = start(pool, 2)
            # About 1.5 s on a quiet machine; once over 30 s with the machine's two cores at load 9.
            wait_for(lambda: succeeded(after), timeout=60)
            ran_again = time.monotonic() - failed_over
            assert Task.objects.get(pk=after.pk).rq_job_id, "the wake-up went through the queue, not the dispatcher"
            # What the replica had copied from the old master is still there.
            assert caches["sentinel"].get("before") == "failover"
            caches["sentinel"].set("after", "failover")
            new_master = Redis(host="127.0.0.1", port=replica, db=0)
            assert new_master.get(caches["sentinel"].make_and_validate_key("after")), "the cache is on the new master"
            assert wait_for(probes.redis_ok, timeout=10)
            assert admin_client.get("/admin/rq/").status_code == 200
            assert "worker:flows" not in wait_for(_sightings_after_failover, timeout=15).silent

            # Stopped as an operator stops it, it leaves the new master's list of workers: its BLPOP,
            # cut by SIGTERM, left no reply behind for the next command to read.
            worker.terminate()
            worker.wait(timeout=10)
            assert Worker.all(connection=new_master) == []
        finally:
            stop(worker)
    print(f"\nsentinel failover: the task after it ran {ran_again:.1f} s after the sentinels named the new master; "
          f"whole test {time.monotonic() - began:.1f} s")


def _sightings_after_failover():
    from telemetry.health.heartbeats import sightings

    try:
        return sightings()
    except Exception:
        return None


class Interrupted(Exception):
    """Raised by a signal handler mid-read, as RQ's StopRequested is when a worker gets SIGTERM."""


@pytest.mark.slow
def test_a_command_cut_by_a_signal_leaves_no_reply_for_the_next_one(tmp_path):
    def interrupt(signum, frame):
        raise Interrupted

    with sentinel_cluster(tmp_path, sentinels=1) as (_, master, _, sentinel_ports):
        client = SentinelMaster(sentinels=(("127.0.0.1", sentinel_ports[0]),), name=MASTER_NAME).client(5)
        previous = signal.signal(signal.SIGALRM, interrupt)
        try:
            signal.setitimer(signal.ITIMER_REAL, 0.2)
            with pytest.raises(Interrupted):
                client.blpop(["nothing-here"], timeout=1)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
        _redis(master).rpush("list", "value")

        # On a connection kept in the pool, LRANGE would read the BLPOP's late "nothing" (None).
        assert client.lrange("list", 0, -1) == [b"value"]


def test_a_sentinel_master_shown_anywhere_never_shows_its_passwords():
    # Its repr is what a debug page, diffsettings or a log line of CACHES shows.
    master = SentinelMaster(sentinels=(("10.0.0.1", 26379),), name=MASTER_NAME, password="m-s3cr3t",
                            sentinel_password="s-s3cr3t")
    assert "s3cr3t" not in repr(master) and "10.0.0.1" in repr(master)
