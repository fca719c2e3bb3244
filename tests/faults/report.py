"""The fault suite's table: one row per fault, printed by conftest.py at the end of the run.
"executions": flows run; "overlapping": tasks with two executions at once; "held twice": resources
two executions ran on at once; "ok twice": tasks whose flow the upstream said ok to more than once;
"dead, ok": tasks that ended dead although a flow of theirs had the upstream's ok."""

COLUMNS = ("fault", "tasks started", "executions", "succeeded", "dead", "lost", "run twice", "overlapping",
           "held twice", "ok twice", "dead, ok", "settle (s)", "restarted")
ROWS: list[tuple] = []


def add(fault: str, *, started: int, executions: int, succeeded: int, dead: int, lost: int, run_twice: int,
        overlapping: int, held_twice: int, succeeded_twice: int, dead_whose_flow_succeeded: int, settle: float,
        restarted: int) -> None:
    ROWS.append((fault, started, executions, succeeded, dead, lost, run_twice, overlapping, held_twice,
                 succeeded_twice, dead_whose_flow_succeeded, f"{settle:.1f}", restarted))


def table() -> list[str]:
    cells = [COLUMNS, *ROWS]
    widths = [max(len(str(row[i])) for row in cells) for i in range(len(COLUMNS))]
    return ["  ".join(str(v).ljust(w) if i == 0 else str(v).rjust(w) for i, (v, w) in enumerate(zip(row, widths)))
            for row in cells]
