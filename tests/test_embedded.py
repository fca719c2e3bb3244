"""The embedded defaults: what a machine with neither PostgreSQL nor Redis installed runs on."""

import os
import re
import subprocess
import sys
from pathlib import Path

import psutil
import psycopg
import pytest
import redis
from rq import Queue, SimpleWorker

from retryops import devservices

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_embedded_postgres_starts_migrates_and_claims_with_skip_locked(tmp_path):
    url = devservices.start_embedded_postgres(tmp_path / "postgres")
    devservices.ensure_database(url)
    env = {**os.environ, "DATABASE_URL": url}
    migrate = subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env,
                             capture_output=True, text=True, timeout=120)
    assert migrate.returncode == 0, migrate.stderr
    script = (
        "import django; django.setup()\n"
        "from resources.models import ResourcePool, Resource\n"
        "from resources import services\n"
        "pool = ResourcePool.objects.create(name='embedded')\n"
        "Resource.objects.create(pool=pool, key='k1')\n"
        "print(services.claim_next(pool='embedded', holder='probe').key)\n"
    )
    claim = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60,
                           env={**env, "DJANGO_SETTINGS_MODULE": "retryops.settings"})
    assert claim.returncode == 0, claim.stderr
    assert claim.stdout.strip() == "k1"
    with psycopg.connect(url) as conn:
        assert conn.execute("SHOW server_version").fetchone()[0].startswith("18")


def noop():
    return "ran"


@pytest.mark.slow
def test_embedded_redis_runs_rq_jobs(tmp_path):
    url = devservices.start_embedded_redis(tmp_path)
    connection = redis.Redis.from_url(url)
    queue = Queue("embedded", connection=connection)
    job = queue.enqueue(noop)
    SimpleWorker([queue], connection=connection).work(burst=True)
    job.refresh()
    assert job.return_value() == "ran"
    connection.close()
    devservices.leave_embedded_redis(tmp_path)


# A process that uses the embedded server (redis or postgres) in the folder given as its
# argument and holds it until its stdin closes; it prints the server's URL once it is up.
SERVER_USER = (
    "import sys\n"
    "from pathlib import Path\n"
    "from retryops import devservices\n"
    "start = getattr(devservices, f'start_embedded_{sys.argv[1]}')\n"
    "print(start(Path(sys.argv[2])), flush=True)\n"
    "sys.stdin.read()\n"
)


class ServerUser:
    """A separate process using an embedded server in `folder`, as `manage.py up` or `shell` would."""

    kind = ""

    def __init__(self, folder: Path, env: dict | None = None):
        self.process = subprocess.Popen([sys.executable, "-c", SERVER_USER, self.kind, str(folder)], cwd=ROOT,
                                        text=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
        self.url = self.process.stdout.readline().strip()
        assert self.url, f"the embedded {self.kind} did not start"

    def exit(self) -> None:
        self.process.stdin.close()
        assert self.process.wait(timeout=30) == 0

    def kill(self) -> None:
        self.process.kill()
        self.process.wait(timeout=30)


class RedisUser(ServerUser):
    kind = "redis"


class PostgresUser(ServerUser):
    kind = "postgres"


def answers(url: str) -> bool:
    try:
        return redis.Redis.from_url(url, socket_timeout=5).ping()
    except (redis.ConnectionError, FileNotFoundError):
        return False


@pytest.fixture
def redis_folder(tmp_path):
    """A folder for an embedded Redis; a server a failed test left running there is stopped."""
    folder = tmp_path / "embedded"
    yield folder
    try:
        psutil.Process(int((folder / "redis.pid").read_text())).kill()
    except (OSError, ValueError, psutil.NoSuchProcess):
        pass


@pytest.mark.slow
def test_a_second_process_leaves_the_embedded_redis_running_for_the_first(redis_folder):
    app = RedisUser(redis_folder)
    shell = RedisUser(redis_folder)
    assert shell.url == app.url
    shell.exit()
    assert answers(app.url)
    app.exit()


@pytest.mark.slow
def test_the_embedded_redis_stops_when_its_last_user_exits(redis_folder):
    app = RedisUser(redis_folder)
    shell = RedisUser(redis_folder)
    app.exit()
    assert answers(shell.url)
    shell.exit()
    assert not answers(shell.url)


@pytest.mark.slow
def test_the_embedded_redis_runs_with_persistence_off(redis_folder):
    app = RedisUser(redis_folder)
    config = redis.Redis.from_url(app.url, decode_responses=True)
    assert config.config_get("save") == {"save": ""}
    assert config.config_get("appendonly") == {"appendonly": "no"}
    app.exit()


@pytest.mark.slow
def test_a_restarted_embedded_redis_starts_empty(redis_folder):
    app = RedisUser(redis_folder)
    redis.Redis.from_url(app.url).set("rq:scheduler-lock:flows", "dead worker")
    app.exit()
    again = RedisUser(redis_folder)
    assert redis.Redis.from_url(again.url).get("rq:scheduler-lock:flows") is None
    again.exit()


@pytest.mark.slow
def test_after_its_user_was_killed_the_embedded_redis_starts_empty(redis_folder):
    app = RedisUser(redis_folder)
    redis.Redis.from_url(app.url).set("rq:scheduler-lock:flows", "dead worker")
    app.kill()
    again = RedisUser(redis_folder)
    assert redis.Redis.from_url(again.url).get("rq:scheduler-lock:flows") is None
    again.exit()


@pytest.mark.slow
def test_the_embedded_redis_leaves_no_temporary_folder_behind(redis_folder, tmp_path):
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    app = RedisUser(redis_folder, env={**os.environ, "TMPDIR": str(tmpdir)})
    app.exit()
    assert list(tmpdir.iterdir()) == []


def pretend_pid_was_reused(folder: Path, dead: int, alive: int) -> None:
    """Make the server's lists of users (in its folder or beside it) say `alive` where they said
    `dead`, as if the dead user's pid now belonged to a running process that is no user; everything
    else they record stays."""
    for users in [*folder.glob("*users*.json"), *folder.glob(".handle_pids.json"),
                  *folder.parent.glob(f"{folder.name}.users.json")]:
        users.write_text(re.sub(rf"\b{dead}\b", str(alive), users.read_text()))


@pytest.mark.slow
def test_a_killed_redis_user_whose_pid_was_reused_does_not_keep_the_old_server(redis_folder):
    app = RedisUser(redis_folder)
    redis.Redis.from_url(app.url).set("rq:scheduler-lock:flows", "dead worker")
    app.kill()
    pretend_pid_was_reused(redis_folder, app.process.pid, os.getpid())
    again = RedisUser(redis_folder)
    assert redis.Redis.from_url(again.url).get("rq:scheduler-lock:flows") is None
    again.exit()


@pytest.fixture
def postgres_folder(tmp_path):
    """A folder for an embedded PostgreSQL; a server a failed test left running there is stopped."""
    folder = tmp_path / "postgres"
    yield folder
    try:
        psutil.Process(int((folder / "postmaster.pid").read_text().split()[0])).terminate()
    except (OSError, ValueError, IndexError, psutil.NoSuchProcess):
        pass


@pytest.mark.slow
def test_after_a_user_was_killed_the_embedded_postgres_still_stops_with_its_last_user(postgres_folder):
    killed = PostgresUser(postgres_folder)
    killed.kill()
    last = PostgresUser(postgres_folder)
    assert psycopg.connect(last.url.rsplit("/", 1)[0] + "/postgres").close() is None
    last.exit()
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(last.url.rsplit("/", 1)[0] + "/postgres", connect_timeout=2)


@pytest.mark.slow
def test_a_killed_postgres_user_whose_pid_was_reused_does_not_keep_the_server_running(postgres_folder):
    killed = PostgresUser(postgres_folder)
    killed.kill()
    pretend_pid_was_reused(postgres_folder, killed.process.pid, os.getpid())
    last = PostgresUser(postgres_folder)
    last.exit()
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(last.url.rsplit("/", 1)[0] + "/postgres", connect_timeout=2)
