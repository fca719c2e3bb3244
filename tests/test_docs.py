"""The documentation: README.md is a newcomer's first ten minutes, and docs/ (built by mkdocs, as
mkdocs.yml says, strictly) holds the rest, with no broken link, anchor or page missing from the nav."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README_MOST_LINES = 250


def build(root: Path, site: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict",
                           "--config-file", str(root / "mkdocs.yml"), "--site-dir", str(site)],
                          capture_output=True, text=True, timeout=120)


def copy_of_the_docs(tmp_path: Path) -> Path:
    shutil.copy(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    return tmp_path


def test_the_docs_build_strictly(tmp_path):
    result = build(ROOT, tmp_path / "site")

    assert result.returncode == 0, result.stderr
    assert (tmp_path / "site" / "configuration" / "index.html").exists()


def test_a_broken_anchor_fails_the_build_naming_it(tmp_path):
    root = copy_of_the_docs(tmp_path)
    with (root / "docs" / "api.md").open("a") as page:
        page.write("\nSee [no such section](concepts.md#no-such-section).\n")

    result = build(root, tmp_path / "site")

    assert result.returncode != 0
    assert "concepts.md#no-such-section" in result.stderr


def test_a_page_missing_from_the_nav_fails_the_build_naming_it(tmp_path):
    root = copy_of_the_docs(tmp_path)
    (root / "docs" / "forgotten.md").write_text("# Forgotten\n")

    result = build(root, tmp_path / "site")

    assert result.returncode != 0
    assert "forgotten.md" in result.stderr


def test_the_readme_fits_a_newcomers_first_ten_minutes():
    lines = (ROOT / "README.md").read_text().splitlines()

    assert len(lines) <= README_MOST_LINES, f"README.md has {len(lines)} lines; move detail to docs/"


def test_every_file_the_readme_links_to_exists():
    # mkdocs checks docs/ only; the README is read on the forge, beside the checkout's files.
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", (ROOT / "README.md").read_text())
    local = [target for target in targets if "://" not in target]

    assert local
    assert [target for target in local if not (ROOT / target).exists()] == []
