"""The fault suite's flow: the shipped http_call flow, after telling the upstream that it started,
and telling it again when it ends.

Executions are recorded outside the database, by the upstream (tests/faults/upstream.py, in the
test's process): a database outage cannot hide one, and the upstream stamps each start and end
with its own clock, which no fault skews (a flow's host may run with a faked clock). The start is
reported before anything else, and the flow fails if it cannot be: no execution goes unrecorded.
An execution that never reports its end died with its process (SIGKILL).

The payload may ask the flow to take longer than its lease before its side effect:
{"sleep": seconds} waits (a pause, a slow step), {"hold_gil": n} computes sum(range(n)), one C call
that holds the GIL throughout (no other thread of the process runs meanwhile). After that, on code
whose FlowContext has check_lease(), the flow checks it still holds its lease.

Run twice, two at once, a resource held twice and a success run again are judged from these
records (tests/faults/executions.py)."""

import json
import logging
import os
import time
import urllib.parse
import urllib.request
import uuid

from django.conf import settings

from scheduling.flows import FlowContext
from scheduling.flows.http_call import http_call

log = logging.getLogger(__name__)


def faults_http(context: FlowContext):
    execution = uuid.uuid4().hex
    _report(context, execution, "start")
    ok = False
    try:
        if seconds := context.payload.get("sleep"):
            time.sleep(float(seconds))
        if n := context.payload.get("hold_gil"):
            sum(range(int(n)))
        check_lease = getattr(context, "check_lease", None)
        if check_lease is not None:
            check_lease()
        result = http_call(context)
        ok = True
        return result
    finally:
        try:
            _report(context, execution, "end", ok=ok, tries=5)
        except Exception:
            # Must not change what the flow returns; the suite counts the execution as still running.
            log.exception("faults: could not report the end of execution %s", execution)


def _report(context: FlowContext, execution: str, event: str, *, ok: bool | None = None, tries: int = 1) -> None:
    url = urllib.parse.urljoin(settings.RETRYOPS_HTTP_CALL_URL, "executions")
    lease_token = getattr(context, "lease_token", None)
    body = json.dumps({
        "event": event, "execution": execution, "task": context.task_id, "attempt": context.attempt,
        "resource": context.resource_key, "lease_token": str(lease_token) if lease_token else None,
        "fencing_token": getattr(context, "fencing_token", None), "pid": os.getpid(),
        "own_clock": time.time(), "ok": ok,
    }).encode()
    request = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": "application/json"})
    for attempt in range(tries):
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                response.read()
            return
        except OSError:
            if attempt == tries - 1:
                raise
            time.sleep(0.2)
