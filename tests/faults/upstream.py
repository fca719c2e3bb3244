"""The upstream the fault suite's flow calls: a local HTTP server whose answers the test sets, and
which records every execution of the flow (its start and its end, on this process's clock)."""

import json
import threading
import time
from contextlib import contextmanager
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Upstream:
    """Answers every POST as its `mode` says, and counts what it answered per (task, attempt).

    Modes: "ok"; "slow" (ok after `delay` seconds, so an attempt is in flight long enough to be
    broken); "timeout" (answers only after the flow's 1 s timeout); "500"; "401" (to even payload indexes,
    500 to the others); "mixed", a
    realistic mix decided by the task's payload index and the attempt number, so that a fault
    meets first attempts that fail retryably, time out, or fail for good."""

    def __init__(self):
        self.mode, self.delay = "ok", 0.0
        self.answers: list[tuple[int, int, int]] = []  # (task, attempt, status)
        self.requests: list[tuple[int, str]] = []  # (task, the mode that answered it)
        # Per execution id: what the flow reported at its start, with "started_at" (this clock),
        # and "finished_at" and "ok" once it reported its end.
        self.executions: dict[str, dict] = {}
        # Each call answered: (task, resource, Fencing-Token or None, Idempotency-Key, status).
        self.calls: list[tuple[int, str, int | None, str, int]] = []
        self._lock = threading.Lock()

    def switch(self, mode: str, *, delay: float = 0.0) -> None:
        self.mode, self.delay = mode, delay

    def successes_of(self, task_ids) -> dict[int, int]:
        """How many 2xx answers each task got (a task paid twice shows 2)."""
        wanted, counts = set(task_ids), {}
        with self._lock:
            for task, _attempt, status in self.answers:
                if task in wanted and status < 300:
                    counts[task] = counts.get(task, 0) + 1
        return counts

    def met(self, mode: str) -> set[int]:
        """The tasks that sent a request the mode `mode` answered."""
        with self._lock:
            return {task for task, answered_by in self.requests if answered_by == mode}

    def executed(self, report: dict) -> None:
        """An execution's start or end, as the flow reported it; stamped with this process's clock."""
        at = datetime.now(UTC)
        with self._lock:
            if report["event"] == "start":
                self.executions[report["execution"]] = {**report, "started_at": at, "finished_at": None}
            else:
                self.executions[report["execution"]].update(finished_at=at, ok=report["ok"])

    def executions_of(self, task_ids) -> list[dict]:
        wanted = set(task_ids)
        with self._lock:
            return [dict(e) for e in self.executions.values() if e["task"] in wanted]

    def stale_fencing_tokens(self, task_ids) -> list[tuple]:
        """Calls answered 2xx that carried a fencing token lower than one an earlier call on the
        same resource carried: a holder whose lease had been handed on, let through. (A token-
        honouring upstream would refuse them; this one only counts them.)"""
        wanted, highest, stale = set(task_ids), {}, []
        with self._lock:
            for task, resource, token, _key, status in self.calls:
                if token is None:
                    continue
                if token < highest.get(resource, token) and task in wanted and status < 300:
                    stale.append((resource, task, token, highest[resource]))
                highest[resource] = max(token, highest.get(resource, token))
        return stale

    def answer(self, body: dict) -> int:
        mode, index, attempt = self.mode, int(body["payload"].get("i", 0)), int(body["attempt"])
        with self._lock:
            self.requests.append((int(body["task"]), mode))
        if mode == "slow":
            time.sleep(self.delay)
            return 200
        if mode == "timeout":
            time.sleep(1.5)
            return 504
        if mode == "500":
            return 500
        if mode == "401":  # the credentials of half the accounts revoked; the rest still failing
            return 401 if index % 2 == 0 else 500
        if mode == "mixed" and attempt == 1:
            if index % 7 == 3:
                return 401
            if index % 4 == 1:
                return 500
            if index % 4 == 2:
                time.sleep(1.5)
                return 504
        if self.delay:
            time.sleep(self.delay)
        return 200

    def record(self, body: dict, status: int, headers) -> None:
        token = headers.get("Fencing-Token")
        with self._lock:
            self.answers.append((int(body["task"]), int(body["attempt"]), status))
            self.calls.append((int(body["task"]), body["resource"]["key"], int(token) if token else None,
                               headers.get("Idempotency-Key", ""), status))


@contextmanager
def serving(upstream: Upstream):
    """Serve `upstream` on a free loopback port; yields its URL."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if self.path.rstrip("/").endswith("/executions"):
                upstream.executed(body)
                self.send_response(204)
                self.end_headers()
                return
            status = upstream.answer(body)
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(json.dumps({"status": status}).encode())
            except OSError:
                return  # the flow timed out and went away: it never saw this answer
            if status != 504:
                upstream.record(body, status, self.headers)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="faults-upstream", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
