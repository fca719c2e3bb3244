"""bench/run_all.py's table and its markers in docs/benchmarks.md, and the figures the benchmarks write
(bench/common.py)."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import common  # noqa: E402
import run_all  # noqa: E402

ABOUT = {"date": "2026-01-01 00:00 UTC", "commit": "abc1234", "cores": 2, "cpu": "a CPU", "ram_gib": 8.0,
         "postgres": "15.2", "redis": "7.0.15", "load_start": (1.0, 2.0, 3.0)}


@pytest.fixture
def figures(monkeypatch):
    monkeypatch.setattr(common, "FIGURES", [])
    return common


def test_a_figure_is_kept_beside_its_baseline_with_their_ratio(figures):
    figures.figure("pairs", 700.0, "pairs/s", baseline=1000.0, baseline_name="raw SQL", target=">= 0.5")

    assert figures.FIGURES == [{"name": "pairs", "value": 700.0, "unit": "pairs/s", "baseline": 1000.0,
                                "baseline_name": "raw SQL", "ratio": 0.7, "target": ">= 0.5"}]


def test_a_ratio_given_by_the_benchmark_wins_over_value_by_baseline(figures):
    figures.figure("tasks", 150.0, "tasks/s", baseline=400.0, baseline_name="plain RQ", ratio=0.41)

    assert figures.FIGURES[0]["ratio"] == 0.41


def test_json_figures_read_back_as_written(figures, tmp_path):
    figures.figure("scrape p95", 40.0, "ms", baseline=60.0, baseline_name="1,000 attempts")
    figures.write_figures(str(tmp_path / "out.json"), sizes=[1000, 1000000])

    assert figures.read_figures(str(tmp_path / "out.json")) == figures.FIGURES


def test_table_row_shows_value_baseline_ratio_target_and_load():
    runs = [{"script": "claim.py", "load": 1.5, "figures": [
        {"name": "claim+release", "value": 717.0, "unit": "pairs/s", "baseline": 971.0, "baseline_name": "raw SQL",
         "ratio": 717 / 971, "target": ""},
        {"name": "double claims", "value": 0, "unit": "claims", "baseline": None, "baseline_name": "", "ratio": None,
         "target": "0"}]}]

    lines = run_all.table(ABOUT, runs, quick=False).splitlines()

    assert "| `bench/claim.py` | claim+release | 717 pairs/s | 971 pairs/s (raw SQL) | 0.74 |  | 1.5 |" in lines
    assert "| `bench/claim.py` | double claims | 0 claims | — | — | 0 | 1.5 |" in lines


def test_table_names_the_machine_and_a_quick_run():
    text = run_all.table(ABOUT, [], quick=True)

    assert "--quick" in text and "2 cores (a CPU)" in text and "PostgreSQL 15.2, Redis 7.0.15" in text


def test_a_failed_benchmark_gets_a_row_saying_why():
    runs = [{"script": "api.py", "load": 4.0, "error": "exit status 1: gunicorn did not start"}]

    assert "| `bench/api.py` | failed: exit status 1: gunicorn did not start | | | | | 4.0 |" in run_all.table(
        ABOUT, runs, quick=False)


def test_the_table_is_replaced_between_the_markers_only(monkeypatch, tmp_path):
    page = tmp_path / "docs" / "benchmarks.md"
    page.parent.mkdir()
    page.write_text(f"intro\n{run_all.BEGIN}\nold table\n{run_all.END}\nafter\n")
    monkeypatch.setattr(run_all, "ROOT", tmp_path)
    monkeypatch.setattr(run_all, "TABLE_PAGE", page)

    run_all.write_table_page("new table")

    assert page.read_text() == f"intro\n{run_all.BEGIN}\nnew table\n{run_all.END}\nafter\n"


def test_a_page_without_the_markers_is_refused_and_left_alone(monkeypatch, tmp_path):
    page = tmp_path / "docs" / "benchmarks.md"
    page.parent.mkdir()
    page.write_text("no markers here\n")
    monkeypatch.setattr(run_all, "ROOT", tmp_path)
    monkeypatch.setattr(run_all, "TABLE_PAGE", page)

    with pytest.raises(SystemExit, match="docs/benchmarks.md needs one <!-- bench:begin -->"):
        run_all.write_table_page("new table")
    assert page.read_text() == "no markers here\n"


def test_the_table_is_written_into_the_benchmarks_page_which_holds_the_markers_once():
    page = run_all.ROOT / "docs" / "benchmarks.md"
    text = page.read_text()

    assert run_all.TABLE_PAGE == page
    assert text.count(run_all.BEGIN) == text.count(run_all.END) == 1
    assert text.index(run_all.BEGIN) < text.index(run_all.END)
    assert run_all.BEGIN not in (run_all.ROOT / "README.md").read_text()
