"""Actions on the resources behind a work order's dead letters."""

from compensation.models import DeadLetter
from compensation.runbooks.catalog import ActionContext
from resources.models import Resource
from resources.services import quarantine
from retryops.errors import IllegalTransition


def quarantine_resources(context: ActionContext) -> dict:
    """Quarantine the resources of the work order's dead letters (a banned account, a revoked
    key), so no new task takes them; `reason` is kept on each resource. One already quarantined
    or in use is skipped with its state, and the others go on."""
    reason = context.input["reason"].strip()  # as the console's and the API's reasons are
    ids = (DeadLetter.objects.filter(work_order_id=context.work_order_id, resource__isnull=False)
           .values_list("resource_id", flat=True).distinct())
    done, skipped = [], {}
    for resource in Resource.objects.filter(pk__in=ids).order_by("id"):
        try:
            quarantine(resource=resource.pk, actor=context.actor, reason=reason)
            done.append(resource.key)
        except IllegalTransition as exc:
            skipped[resource.key] = exc.details.get("state") or str(exc)
    return {"quarantined": done, "skipped": skipped}
