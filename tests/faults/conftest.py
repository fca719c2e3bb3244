"""Prints the fault suite's table at the end of the run, also in CI whatever -s says, and writes it
to artifacts/faults.txt. "restarted": processes the supervisor started again after they exited."""

from tests.faults.report import ROWS, table
from tests.telemetry.processes import ROOT


def pytest_terminal_summary(terminalreporter):
    if not ROWS:
        return
    lines = table()
    terminalreporter.section("fault injection (lost, run twice, overlapping, held twice, ok twice and dead, ok must be 0)")
    for line in lines:
        terminalreporter.write_line(line)
    artifacts = ROOT / "artifacts"
    artifacts.mkdir(exist_ok=True)
    (artifacts / "faults.txt").write_text("\n".join(lines) + "\n")
