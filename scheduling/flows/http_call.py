"""The http_call flow: POST the payload and the resource's attributes to a configured URL.

2xx is success (the JSON body, if any, is the result). Timeouts, connection errors, 429 and 5xx
raise errors the default patterns classify as retryable; 401 and 403 as non-retryable; any
other status fails with its code. Each request carries the business instance's Idempotency-Key
(the same for every attempt and rerun) and the lease's Fencing-Token, and is sent only after the
lease is checked, on PostgreSQL's clock, to still hold. The URL and timeout are settings, not payload, so a task
cannot point the worker at an arbitrary host: RETRYOPS_HTTP_CALL_URL, RETRYOPS_HTTP_CALL_TIMEOUT.
"""

import json
import socket
import urllib.error
import urllib.parse
import urllib.request

from django.conf import settings

from scheduling.flows import FlowContext


class HttpCallError(Exception):
    """An HTTP answer the flow does not accept; the message carries the status."""


def _shown(url: str) -> str:
    """The URL as an error may say it: without its query, fragment and user info, where a key or
    a password may be. The error goes to the attempt, the dead letter, the work order's title and
    the pages sent to Slack and PagerDuty, none of which masks anything in free text."""
    parts = urllib.parse.urlsplit(url)
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc.rpartition("@")[2], parts.path, "", ""))


def http_call(context: FlowContext):
    url = getattr(settings, "RETRYOPS_HTTP_CALL_URL", "")
    if not url:
        raise HttpCallError("RETRYOPS_HTTP_CALL_URL is not set: the http_call flow has nowhere to send")
    shown = _shown(url)
    body = json.dumps({
        "task": context.task_id, "attempt": context.attempt, "payload": context.payload,
        "resource": {"key": context.resource_key, "attributes": context.resource_attributes},
    }).encode()
    request = urllib.request.Request(url, data=body, method="POST", headers={
        "Content-Type": "application/json", "Idempotency-Key": context.idempotency_key,
        "Fencing-Token": str(context.fencing_token),
    })
    timeout = float(getattr(settings, "RETRYOPS_HTTP_CALL_TIMEOUT", 10))
    # Last thing before the request: a worker paused past its lease learns here that the resource
    # may be someone else's now, and sends nothing (LeaseMismatch fails the attempt).
    context.check_lease()
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            text = response.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        raise HttpCallError(f"HTTP {exc.code} from {shown}: {exc.read()[:200].decode('utf-8', 'replace')}") from None
    except (socket.timeout, TimeoutError):
        raise TimeoutError(f"POST {shown} timed out after {timeout:g}s") from None
    except urllib.error.URLError as exc:
        if isinstance(exc.reason, (socket.timeout, TimeoutError)):
            raise TimeoutError(f"POST {shown} timed out after {timeout:g}s") from None
        raise ConnectionError(f"connection refused or reset by {shown}: {exc.reason}") from None
    try:
        return json.loads(text) if text.strip() else None
    except json.JSONDecodeError:
        return {"body": text[:2000]}
