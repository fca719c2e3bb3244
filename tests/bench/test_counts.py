"""bench/counts.py counts what issue 23 measures the house by, on a tree made for the test."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("bench_counts", ROOT / "bench" / "counts.py")
counts = importlib.util.module_from_spec(spec)
spec.loader.exec_module(counts)


def test_counts_name_processes_variables_error_classes_and_admin_modules(tmp_path):
    (tmp_path / "retryops" / "migrations").mkdir(parents=True)
    (tmp_path / "retryops" / "migrations" / "0001_initial.py").write_text("x = 1\n" * 50)
    (tmp_path / "retryops" / "settings.py").write_text(
        'import os\nA = env_int("RETRYOPS_A", default=1)\nB = os.environ.get("RETRYOPS_B")\n'
        'C = os.environ["RETRYOPS_A"]\nENV_VAR = "RETRYOPS_C"\n')
    (tmp_path / "retryops" / "errors.py").write_text(
        "class DomainError(Exception):\n    pass\n\n\nclass BadInput(DomainError):\n    pass\n\n\n"
        "class Plain:\n    pass\n")
    (tmp_path / "retryops" / "admin_things.py").write_text("")
    (tmp_path / "templates").mkdir()
    (tmp_path / "templates" / "page.html").write_text("<p>\n</p>\n")
    (tmp_path / "deploy").mkdir()
    (tmp_path / "deploy" / "Procfile").write_text("# the processes\nweb: gunicorn\nworker: rqworker\n")
    (tmp_path / "deploy" / "gunicorn.conf.py").write_text('workers = env_int("WEB_CONCURRENCY", 2)\n')
    (tmp_path / "README.md").write_text("# RetryOps\n\nWhat it is.\n")

    assert counts.counts(tmp_path) == {
        "source lines (no tests, no migrations)": 5 + 10 + 2,  # settings, errors, the template
        "process types (deploy/Procfile)": 2,
        "environment variables": 4,
        "error classes": 2,
        "README lines": 3,
        "admin modules": 1,
    }
