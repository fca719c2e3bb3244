"""A real streaming replica: a PostgreSQL server of its own on loopback and a hot standby copied
from it with pg_basebackup (about 5 s for both), which the `replica` alias points at. Idle, it is
not behind; with its replay paused while the primary writes, it is; stopped in the middle of a
read, the read is made again on the test database, the primary.

Skipped where PostgreSQL's server binaries (initdb, pg_ctl, pg_basebackup) are not installed."""

import copy
import glob
import logging
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg
import pytest
from django.db import DEFAULT_DB_ALIAS, connections

from retryops import replica as replicas
from retryops.replica import REPLICA
from tests.http_server import free_port
from tests.telemetry.processes import wait_for


def _server_binaries() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_basebackup"), key=lambda p: int(p.split("/")[4]))
    if found:
        return Path(found[-1]).parent
    which = shutil.which("pg_basebackup")
    return Path(which).parent if which and shutil.which("initdb") else None


BIN = _server_binaries()
pytestmark = pytest.mark.skipif(BIN is None, reason="PostgreSQL's server binaries are not installed")


def _run(*command: str) -> None:
    # PostgreSQL refuses to run as root: its own user then runs it.
    prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    subprocess.run([*prefix, *command], check=True, capture_output=True, timeout=60)


class Pair:
    """A primary and its streaming replica, each a data directory in `folder` and a loopback port."""

    def __init__(self, folder: str):
        self.folder, self.primary_port, self.replica_port = folder, free_port(), free_port()

    def start(self) -> None:
        primary, standby = f"{self.folder}/primary", f"{self.folder}/replica"
        _run(f"{BIN}/initdb", "-D", primary, "-U", "postgres", "-A", "trust", "--no-sync")
        with open(f"{primary}/postgresql.conf", "a") as conf:
            conf.write(f"listen_addresses='127.0.0.1'\nport={self.primary_port}\nfsync=off\n"
                       f"unix_socket_directories='{self.folder}'\n")
        with open(f"{primary}/pg_hba.conf", "a") as hba:
            hba.write("host replication all 127.0.0.1/32 trust\n")
        _run(f"{BIN}/pg_ctl", "-D", primary, "-l", f"{self.folder}/primary.log", "-w", "start")
        _run(f"{BIN}/pg_basebackup", "-h", "127.0.0.1", "-p", str(self.primary_port), "-U", "postgres",
             "-D", standby, "-R", "-X", "stream", "-c", "fast", "--no-sync")
        with open(f"{standby}/postgresql.conf", "a") as conf:
            conf.write(f"port={self.replica_port}\n")
        self.start_replica()

    def start_replica(self) -> None:
        _run(f"{BIN}/pg_ctl", "-D", f"{self.folder}/replica", "-l", f"{self.folder}/replica.log", "-w", "start")
        wait_for(lambda: self.query("replica", "SELECT EXISTS (SELECT FROM pg_stat_wal_receiver)")[0], timeout=10,
                 every=0.05)

    def stop(self, which: str) -> None:
        _run(f"{BIN}/pg_ctl", "-D", f"{self.folder}/{which}", "-m", "immediate", "-w", "stop")

    def running(self, which: str) -> bool:
        return os.path.exists(f"{self.folder}/{which}/postmaster.pid")

    def query(self, which: str, *statements: str) -> tuple:
        """The first row of the last of `statements`, run on `which` server."""
        port = self.primary_port if which == "primary" else self.replica_port
        with psycopg.connect(host="127.0.0.1", port=port, user="postgres", dbname="postgres",
                             autocommit=True) as conn:
            for sql in statements:
                cursor = conn.execute(sql)
            return cursor.fetchone()

    def write_and_wait_for_replay(self) -> None:
        """A transaction on the primary, replayed on the replica."""
        [lsn] = self.query("primary", "CREATE TABLE IF NOT EXISTS t (n int)", "INSERT INTO t VALUES (1)",
                           "SELECT pg_current_wal_lsn()::text")
        wait_for(lambda: self.query("replica", f"SELECT pg_last_wal_replay_lsn() >= '{lsn}'")[0], timeout=10,
                 every=0.05)


@pytest.fixture(scope="module")
def pair():
    folder = tempfile.mkdtemp(prefix="retryops-replica-")
    if os.geteuid() == 0:
        shutil.chown(folder, user="postgres")
    servers = Pair(folder)
    try:
        servers.start()
        yield servers
    finally:
        for which in ("replica", "primary"):
            if servers.running(which):
                servers.stop(which)
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def streaming_replica(pair, transactional_db, django_db_blocker):
    """The `replica` alias on the pair's replica, running and replaying (see test_replica.py's
    replica_alias for the guard lifted)."""
    if not pair.running("replica"):
        pair.start_replica()
    pair.query("replica", "SELECT pg_wal_replay_resume()")
    replicas.forget_replica_health()
    connections.settings[REPLICA] = {**copy.deepcopy(connections[DEFAULT_DB_ALIAS].settings_dict),
                                     "HOST": "127.0.0.1", "PORT": pair.replica_port, "NAME": "postgres"}
    try:
        with django_db_blocker.unblock():
            yield pair
    finally:
        connections[REPLICA].close()
        del connections[REPLICA]
        del connections.settings[REPLICA]
        replicas.forget_replica_health()


def test_an_idle_caught_up_replica_is_not_behind_however_old_its_last_replayed_transaction(
        streaming_replica, settings):
    settings.RETRYOPS_REPLICA_MAX_LAG_SECONDS = 1
    streaming_replica.write_and_wait_for_replay()
    time.sleep(1.2)  # the primary idle: the replica's last replayed transaction is older than the limit

    health = replicas.check_replica()

    assert (health.state, health.lag_seconds) == (replicas.OK, 0.0)


def test_a_replica_whose_replay_is_paused_while_the_primary_writes_is_lagging_and_not_read(
        streaming_replica, settings, caplog):
    settings.RETRYOPS_REPLICA_MAX_LAG_SECONDS = 1
    streaming_replica.write_and_wait_for_replay()
    streaming_replica.query("replica", "SELECT pg_wal_replay_pause()")
    time.sleep(1.2)
    [lsn] = streaming_replica.query("primary", "INSERT INTO t VALUES (2)", "SELECT pg_current_wal_lsn()::text")
    wait_for(lambda: streaming_replica.query("replica", f"SELECT pg_last_wal_receive_lsn() >= '{lsn}'")[0],
             timeout=10, every=0.05)

    with caplog.at_level(logging.WARNING, logger="retryops.replica"):
        health = replicas.check_replica()
        with replicas.replica_reads():
            assert replicas.read_alias() == DEFAULT_DB_ALIAS

    assert health.state == replicas.LAGGING
    assert health.lag_seconds > 1
    assert "behind the primary" in caplog.text


def test_a_replica_stopped_in_the_middle_of_a_read_leaves_the_read_to_the_primary(streaming_replica, caplog):
    def server_port() -> str:
        """The port of the server that answers, the replica's stopped before its first answer."""
        with connections[replicas.read_alias()].cursor() as cursor:
            if replicas.read_alias() == REPLICA:
                streaming_replica.stop("replica")
            cursor.execute("SELECT current_setting('port')")
            return cursor.fetchone()[0]

    assert replicas.check_replica().state == replicas.OK  # connected to the replica, then:
    with caplog.at_level(logging.WARNING, logger="retryops.replica"):
        answered = replicas.from_replica(server_port)

    assert answered != str(streaming_replica.replica_port)
    assert answered == str(connections[DEFAULT_DB_ALIAS].settings_dict["PORT"] or 5432)
    assert replicas.replica_health(check=False).state == replicas.UNREACHABLE
    assert [r.getMessage().split(":")[0] for r in caplog.records if r.name == "retryops.replica"] == [
        "a read on the read replica failed; read again on the primary", "read replica unreachable"]
