"""settings.py read in a process of its own, as a deployment starts: a bad variable must stop it."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def start_up(show: str = "None", **environment) -> subprocess.CompletedProcess:
    """Django set up with `environment` (and a database URL, but no REDIS_URL unless given), then
    the JSON of the Python expression `show`, which may use `settings`, on its last line."""
    env = {"DJANGO_SETTINGS_MODULE": "retryops.settings", "PATH": "/usr/bin:/bin", "SECRET_KEY": "x",
           "DATABASE_URL": "postgresql://postgres@127.0.0.1:5432/x", **environment}
    program = ("import django, json; django.setup(); from django.conf import settings; "
               f"print(json.dumps({show}, default=repr))")
    return subprocess.run([sys.executable, "-c", program], env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
