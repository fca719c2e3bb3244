"""The demo flow: succeeds or fails as its payload says, for the demo, tests and benchmarks.

Payload keys (all optional):
- "script": a list of outcomes, one per attempt ("ok", or an error such as "TimeoutError: slow");
  the last one repeats.
- "failure_rate", "non_retryable_rate": chances of a retryable / non-retryable failure.
- "sleep": seconds each run takes; with "sleep_attempts" (a list of numbers), only those attempts sleep.
"""

import random
import time

from scheduling.flows import FlowContext


class DemoFlowError(Exception):
    """A failure the demo flow was told to produce."""


def _fail(outcome: str):
    name, _, message = outcome.partition(":")
    error_class = {"TimeoutError": TimeoutError, "ConnectionResetError": ConnectionResetError,
                   "PermissionError": PermissionError}.get(name.strip())
    if error_class is None:
        raise DemoFlowError(outcome)
    raise error_class(message.strip())


def demo(context: FlowContext):
    payload = context.payload
    if payload.get("sleep") and context.attempt in payload.get("sleep_attempts", [context.attempt]):
        time.sleep(float(payload["sleep"]))
    script = payload.get("script")
    if script:
        outcome = script[min(context.attempt, len(script)) - 1]
        if outcome != "ok":
            _fail(outcome)
        return {"resource": context.resource_key, "attempt": context.attempt}
    roll = random.random()
    if roll < float(payload.get("non_retryable_rate", 0)):
        raise PermissionError("HTTP 403: account suspended by upstream")
    if roll < float(payload.get("non_retryable_rate", 0)) + float(payload.get("failure_rate", 0)):
        raise TimeoutError("upstream timed out after 30s")
    return {"resource": context.resource_key, "attempt": context.attempt}


def noop(context: FlowContext):
    return None
