"""How big the house is: the counts issue 23 (simplify the house) is measured by, for the checkout
and for a baseline revision side by side, with the ratio.

    python bench/counts.py                 # this checkout beside d34c099 (before issue 23)
    python bench/counts.py --baseline REV  # beside another revision

Source lines are the project's Python, templates, scripts and styles outside tests and
migrations; environment variables
are the distinct names the project reads (env_* readers, os.environ, os.getenv); error classes
are the classes whose bases lead to an exception; admin modules are admin*.py files and modules
of admin packages. Reads files only: it needs no database."""

import argparse
import ast
import builtins
import re
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BASELINE = "d34c099"
PACKAGES = ("audit", "resources", "scheduling", "compensation", "telemetry", "retryops")
# A reader's literal name, or a module's ENV_VAR constant that a reader is given (retryops/flags.py).
ENV_NAME = re.compile(r"""(?:env_\w+|os\.environ\.get|os\.getenv|os\.environ\[|ENV_VAR\s*=)\(?\s*["']([A-Z][A-Z0-9_]+)["']""")
# Exceptions of Python's and of the libraries ours derive from.
BUILTIN_ERRORS = {name for name, value in vars(builtins).items()
                  if isinstance(value, type) and issubclass(value, BaseException)} | {
    "ValidationError", "APIException", "CommandError", "ImproperlyConfigured", "PermissionDenied"}


def python_files(root: Path):
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            if "migrations" not in path.parts:
                yield path


def source_lines(root: Path, python: dict) -> int:
    """Python (bench/ too), templates, scripts and styles: everything but tests and migrations."""
    others = [path for folder in (*PACKAGES, "templates", "bench") for suffix in ("html", "js", "css", "py")
              for path in (root / folder).rglob(f"*.{suffix}")
              if "migrations" not in path.parts and path not in python]
    return sum(text.count("\n") for text in python.values()) + sum(
        path.read_text(encoding="utf-8").count("\n") for path in others)


def counts(root: Path) -> dict[str, int]:
    files = list(python_files(root))
    texts = {path: path.read_text(encoding="utf-8") for path in files}
    deployed = [path.read_text(encoding="utf-8") for path in sorted((root / "deploy").glob("*.py"))]
    procfile = root / "deploy" / "Procfile"
    processes = [line for line in procfile.read_text().splitlines() if re.match(r"^[a-z_]+:", line)] \
        if procfile.exists() else []
    return {
        "source lines (no tests, no migrations)": source_lines(root, texts),
        "process types (deploy/Procfile)": len(processes),
        # deploy/gunicorn.conf.py reads some too.
        "environment variables": len({name for text in [*texts.values(), *deployed] for name in ENV_NAME.findall(text)}),
        "error classes": _error_classes(texts.values()),
        "README lines": (root / "README.md").read_text(encoding="utf-8").count("\n"),
        "admin modules": sum(1 for path in files if path.name.startswith("admin") or "admin" in path.parent.name),
    }


def _error_classes(texts) -> int:
    """Class definitions (two of one name in two modules are two) whose bases lead to an exception."""
    classes = [(node.name, [b.attr if isinstance(b, ast.Attribute) else getattr(b, "id", "") for b in node.bases])
               for text in texts for node in ast.walk(ast.parse(text)) if isinstance(node, ast.ClassDef)]
    errors, grew = set(), True
    while grew:  # a class is an error when one of its bases is, ours or a library's
        found = {name for name, bases in classes if any(b in errors or b in BUILTIN_ERRORS for b in bases)}
        grew, errors = found != errors, found
    return sum(1 for name, _ in classes if name in errors)


def baseline_tree(rev: str, into: Path) -> Path:
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev], check=True, capture_output=True).stdout
    with tempfile.TemporaryFile() as file:
        file.write(archive)
        file.seek(0)
        tarfile.open(fileobj=file).extractall(into, filter="data")
    return into


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default=BASELINE, help=f"the revision to compare with (default {BASELINE})")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        before = counts(baseline_tree(options.baseline, Path(scratch)))
    now = counts(ROOT)
    print(f"{'':45} {options.baseline:>10} {'now':>10} {'ratio':>7}")
    for name, value in now.items():
        ratio = value / before[name] if before[name] else float("nan")
        print(f"{name:45} {before[name]:>10,} {value:>10,} {ratio:>7.2f}")


if __name__ == "__main__":
    sys.exit(main())
