"""An external action: ask the billing system to compensate the customers of a work order
(a refund, a credit). It moves money outside RetryOps, so its runbook marks it `external: true`
and it runs only after a second operator's approval."""

import httpx
from django.conf import settings

from compensation.models import DeadLetter
from compensation.runbooks.catalog import ActionContext


# Seconds for the billing system to answer (connect, read, write).
TIMEOUT = 10


class BillingError(Exception):
    """The billing system did not accept the compensation request."""


def request_compensation(context: ActionContext) -> dict:
    """POST the work order's dead tasks and the operator's input to RETRYOPS_RUNBOOK_HTTP_URL,
    with the run's token as Idempotency-Key, so a request sent twice compensates once."""
    url = settings.RETRYOPS_RUNBOOK_HTTP_URL
    if not url:
        raise BillingError("RETRYOPS_RUNBOOK_HTTP_URL is not set: there is no billing system to ask")
    tasks = list(DeadLetter.objects.filter(work_order_id=context.work_order_id)
                 .order_by("id").values_list("task_id", flat=True)[:1000])
    body = {"work_order": context.work_order_id, "tasks": tasks, "requested_by": context.requested_by,
            "approved_by": context.approved_by, **context.input}
    response = httpx.post(url, json=body, headers={"Idempotency-Key": context.token},
                          timeout=TIMEOUT)
    if response.status_code >= 300:
        raise BillingError(f"HTTP {response.status_code} from the billing system: {response.text[:200]}")
    try:
        answer = response.json()
    except ValueError:
        answer = response.text[:2000]
    return {"status": response.status_code, "answer": answer, "tasks": len(tasks)}
