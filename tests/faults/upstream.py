"""The upstream the fault suite's flow calls: a local HTTP server whose answers the test sets."""

import json
import threading
import time
from contextlib import contextmanager
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

    def record(self, body: dict, status: int) -> None:
        with self._lock:
            self.answers.append((int(body["task"]), int(body["attempt"]), status))


@contextmanager
def serving(upstream: Upstream):
    """Serve `upstream` on a free loopback port; yields its URL."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            status = upstream.answer(body)
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(json.dumps({"status": status}).encode())
            except OSError:
                return  # the flow timed out and went away: it never saw this answer
            if status != 504:
                upstream.record(body, status)

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
