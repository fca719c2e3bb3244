"""The ops processes under soak: two run at once, the leader is killed, the standby takes over.

    .venv/bin/python bench/ops_handover.py [--minutes 5] [soak.py's options]

Runs bench/soak.py with two ops processes (`--ops-processes 2`) and `--kill-ops-leader` (the
leading one gets SIGKILL at three quarters of the load, and is started again as a standby). soak.py
then prints, from the ops processes' log lines (`ops step=… process=… started=… seconds=… ok=…`),
`table`: per step and process the runs, failures, the median and largest gap between two starts
beside the step's cadence, and the longest run; how often two runs of one step overlapped in time
(0: never two at once); and the handover: seconds from the kill to the standby's first step.
"""

import re
import statistics
import sys
from datetime import datetime
from pathlib import Path

STEP_LINE = re.compile(r"ops step=(?P<step>\w+) process=(?P<process>\S+) started=(?P<started>\S+) "
                       r"seconds=(?P<seconds>[\d.]+) ok=(?P<ok>true|false)")


def step_runs(logs: Path) -> list[dict]:
    """Every step run the ops processes' logs in `logs` record, earliest first."""
    runs = []
    for path in sorted(logs.glob("ops-*.log")):
        for match in map(STEP_LINE.search, path.read_text(errors="replace").splitlines()):
            if match:
                runs.append({"step": match["step"], "process": match["process"],
                             "started": datetime.fromisoformat(match["started"]).timestamp(),
                             "seconds": float(match["seconds"]), "ok": match["ok"] == "true"})
    return sorted(runs, key=lambda run: run["started"])


def leader_pid(logs: Path) -> int | None:
    """The pid of the process that ran the latest step."""
    runs = step_runs(logs)
    return int(runs[-1]["process"].rsplit(":", 1)[1]) if runs else None


def overlaps(runs: list[dict]) -> int:
    """Runs of a step that started before the one before it had ended."""
    count, last_end = 0, {}
    for run in runs:
        if run["started"] < last_end.get(run["step"], 0):
            count += 1
        last_end[run["step"]] = max(last_end.get(run["step"], 0), run["started"] + run["seconds"])
    return count


def table(logs: Path, *, cadences: dict[str, float], killed_at: float | None = None,
          killed_pid: int | None = None) -> int:
    """Print the step runs per step and process, the overlaps and the handover; the overlaps."""
    from retryops.ops import with_cadences

    runs = step_runs(logs)
    cadence = {step.name: step.every for step in with_cadences(cadences)}
    print(f"\nops step runs ({len(runs)}), per step and process:")
    print(f"{'step':24}{'process':22}{'runs':>6}{'failed':>8}{'every s':>9}{'gap p50':>9}{'gap max':>9}{'max s':>8}")
    by = {}
    for run in runs:
        by.setdefault((run["step"], run["process"]), []).append(run)
    for (step, process), own in sorted(by.items()):
        gaps = [b["started"] - a["started"] for a, b in zip(own, own[1:])]
        print(f"{step:24}{process:22}{len(own):>6}{sum(not r['ok'] for r in own):>8}{cadence.get(step, 0):>9g}"
              f"{statistics.median(gaps) if gaps else 0:>9.1f}{max(gaps, default=0):>9.1f}"
              f"{max(r['seconds'] for r in own):>8.2f}")
    overlapped = overlaps(runs)
    print(f"runs of one step that overlapped another run of it (two at once): {overlapped}")
    if killed_at is not None:
        after = [run for run in runs if run["started"] >= killed_at and not run["process"].endswith(f":{killed_pid}")]
        if after:
            print(f"handover: the leader (pid {killed_pid}) was killed; {after[0]['process']} ran its first step "
                  f"{after[0]['started'] - killed_at:.1f} s later")
        else:
            print(f"handover: the leader (pid {killed_pid}) was killed; no other process ran a step since")
    return overlapped


if __name__ == "__main__":
    sys.argv[1:1] = ["--ops-processes", "2", "--kill-ops-leader"]
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import soak

    soak.main()
