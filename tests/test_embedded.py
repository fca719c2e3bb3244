"""The embedded defaults: what a machine with neither PostgreSQL nor Redis installed runs on."""

import os
import subprocess
import sys
from pathlib import Path

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
    env = {**os.environ, "DATABASE_URL": url, "RETRYOPS_EMBEDDED_DIR": str(tmp_path)}
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
    url = devservices.start_embedded_redis(tmp_path / "redis.rdb")
    connection = redis.Redis.from_url(url)
    queue = Queue("embedded", connection=connection)
    job = queue.enqueue(noop)
    SimpleWorker([queue], connection=connection).work(burst=True)
    job.refresh()
    assert job.return_value() == "ran"
