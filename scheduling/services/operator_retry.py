"""The operator's "retry this resource": reset it and start a strict task on it, atomically."""

from django.db import transaction

from resources import services as pool
from resources.choices import ResourceState
from resources.errors import ResourceUnavailable
from resources.models import Resource
from scheduling.errors import TaskError
from scheduling.models import RetryPolicy, Task
from scheduling.services.tasks import start_task


def retry_resource(*, resource: Resource | int, actor: str, flow: str | None = None, payload=None,
                   policy: RetryPolicy | str | None = None) -> Task:
    """Reset a failed resource and start a task on it in strict mode, in one transaction: between
    the reset and the job no one else can claim it. Flow and payload default to those of the last
    task that ran on the resource."""
    resource_id = resource.pk if isinstance(resource, Resource) else int(resource)
    with transaction.atomic():
        current = Resource.objects.select_for_update(of=("self",)).select_related("pool").filter(pk=resource_id).first()
        if current is None:
            raise ResourceUnavailable(f"no resource with id {resource_id}", reason="missing", resource_id=resource_id)
        last = Task.objects.filter(attempts__resource=current).order_by("-id").first()
        if flow is None:
            if last is None:
                raise TaskError(f"no task has run on {current.pool.resource_noun} {current.key} yet: name the flow")
            flow = last.flow
            payload = last.payload if payload is None else payload
            policy = policy or last.policy
        if current.state in (ResourceState.FAILED, ResourceState.DONE):
            pool.reset(resource=current, actor=actor, reason="retry this resource")
        elif current.state != ResourceState.AVAILABLE:
            raise pool.describe_unavailability(current)
        return start_task(flow=flow, pool_name=current.pool, payload=payload, policy=policy, created_by=actor,
                          resource=current, strict=True, reserve=True)
