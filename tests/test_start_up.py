"""Start-up at the edges: a process started with a malformed URL stops at once with one line
naming the variable, whichever door it came in by (manage.py's commands, gunicorn)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BAD = [
    ("DATABASE_URL", "postgres://", "DATABASE_URL names no database"),
    ("DATABASE_URL", "mysql://x", "DATABASE_URL must start with postgresql://"),
    ("DATABASE_URL", "not a url", "DATABASE_URL contains a space"),
    ("REDIS_URL", "redis://host:notaport", "REDIS_URL has port 'notaport'"),
    ("REDIS_URL", "http://x", "REDIS_URL must start with redis://"),
]


def start(command: list[str], **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(command, cwd=ROOT, env={**os.environ, **env}, capture_output=True, text=True, timeout=60)


def assert_one_line_naming(result: subprocess.CompletedProcess, said: str) -> None:
    assert result.returncode == 1, result.stderr
    assert result.stderr.splitlines() == [result.stderr.strip()], result.stderr
    assert result.stderr.startswith(f"retryops: bad configuration: {said}")


@pytest.mark.slow
@pytest.mark.parametrize("variable, value, said", BAD)
def test_a_worker_started_with_a_malformed_url_stops_with_one_line_naming_it(variable, value, said):
    result = start([sys.executable, "manage.py", "rqworker", "default", "--burst"], **{variable: value})
    assert_one_line_naming(result, said)


@pytest.mark.slow
@pytest.mark.parametrize("command", [["ops"], ["migrate"], ["up", "--no-serve"]])
def test_every_command_refuses_a_malformed_database_url_before_it_starts(command):
    result = start([sys.executable, "manage.py", *command], DATABASE_URL="mysql://x")
    assert_one_line_naming(result, "DATABASE_URL must start with postgresql://")


@pytest.mark.slow
def test_gunicorn_started_with_a_malformed_url_stops_with_one_line_naming_it():
    result = start([sys.executable, "-m", "gunicorn", "--config", "deploy/gunicorn.conf.py",
                    "retryops.wsgi:application"], REDIS_URL="redis://host:notaport")
    assert_one_line_naming(result, "REDIS_URL has port 'notaport'")


@pytest.fixture
def empty_database(django_db_blocker):
    """A database on the tests' server with nothing in it, as on a new machine before migrate."""
    from django.db import connection
    from psycopg import connect, sql

    name = f"{connection.settings_dict['NAME']}_empty"[:63]
    admin = dict(dbname="postgres", host=connection.settings_dict["HOST"], port=connection.settings_dict["PORT"],
                 user=connection.settings_dict["USER"], autocommit=True)
    with connect(**admin) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    yield (f"postgresql://{connection.settings_dict['USER']}@{connection.settings_dict['HOST']}:"
           f"{connection.settings_dict['PORT']}/{name}")
    with connect(**admin) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


@pytest.mark.slow
@pytest.mark.parametrize("command", [["rqworker", "default", "--burst"], ["ops"]])
def test_a_worker_started_on_an_empty_database_refuses_to_start_saying_to_migrate(empty_database, command):
    result = start([sys.executable, "manage.py", *command], DATABASE_URL=empty_database)
    assert result.returncode == 1, result.stderr
    assert result.stderr.startswith("CommandError: database not migrated: run manage.py migrate; missing: "
                                    "contenttypes.0001_initial, "), result.stderr
    assert result.stderr.count("\n") == 1, result.stderr


@pytest.mark.slow
def test_a_worker_that_cannot_reach_the_database_says_so_and_starts_as_before():
    """An outage is not a schema problem: a worker that exited then would take honcho's others down."""
    from tests.http_server import free_port
    from tests.telemetry.processes import redis_server

    with redis_server() as redis_url:
        result = start([sys.executable, "manage.py", "rqworker", "default", "--burst"],
                       DATABASE_URL=f"postgresql://postgres@127.0.0.1:{free_port()}/retryops", REDIS_URL=redis_url)
    assert result.returncode == 0, result.stderr
    assert result.stderr.startswith("retryops: cannot check the database's migrations (connection failed")
