"""What an operator's strict retry of a resource would meet now, said before it is asked (the
console's retry form and "retry selected"). It asks the retry's own checks, check_available and
instance_to_run_again, rather than a copy of their rules, and writes nothing."""

from dataclasses import dataclass, replace

from django.db import transaction
from django.utils.translation import gettext as _

from resources.models import Resource
from resources.selectors import get_resource
from retryops.errors import DomainError
from scheduling.errors import TaskLive
from scheduling.models import Task
from scheduling.selectors import last_task_on
from scheduling.services.operator_retry import check_available, instance_to_run_again, order_of


@dataclass(frozen=True)
class RetryPreview:
    """A strict retry of `resource` copying `source`'s flow, payload and policy (None: no task ran
    on it), and the refusals it would meet now: `unavailable` (the resource cannot be had: the
    retry asks this first) and `instance_refused` (that payload again would run a business
    instance that runs or has succeeded)."""

    resource: Resource
    source: Task | None
    unavailable: DomainError | None = None
    instance_refused: DomainError | None = None

    @property
    def refusal(self) -> DomainError | None:
        """What the retry would be refused with first, if anything (no source aside)."""
        return self.unavailable or self.instance_refused


def preview_retry(*, resource: Resource | int, source: Task | None = None) -> RetryPreview:
    """What retry_resource would answer now for `resource` (an instance is taken as read) with the
    flow and payload of `source`, by default the last task that ran on it, as the retry copies.
    The world may change before the operator confirms: the retry asks again, under its locks."""
    current = resource if isinstance(resource, Resource) else get_resource(resource_id=resource)
    name = f"{current.pool.resource_noun} {current.key}"
    unavailable = refused = None
    try:
        check_available(current, name)
    except DomainError as exc:
        unavailable = exc
    source = source or last_task_on(current)
    if source is not None:
        try:
            # instance_to_run_again locks the instance's first task, as the retry would; nothing is written.
            with transaction.atomic():
                instance_to_run_again(source, name)
        except DomainError as exc:
            # The task bound to the resource is the instance's run: already said, and better
            # (check_available knows it holds the resource; this one would say it moved on).
            said = isinstance(unavailable, TaskLive) and exc.details.get("task_id") == unavailable.details["task_id"]
            refused = None if said else exc
    return RetryPreview(resource=current, source=source, unavailable=unavailable, instance_refused=refused)


def preview_retries(*, resources: list[Resource]) -> list[RetryPreview]:
    """preview_retry for each of `resources` retried one after another, as "retry selected" does:
    a dead task is the last one on every resource it failed on, so once the first of them starts
    its order, the retry of the next one is refused (task_live), and said so here."""
    previews, starting = [], {}
    for resource in resources:
        preview = preview_retry(resource=resource)
        order = order_of(preview.source) if preview.source is not None else None
        if preview.refusal is None and order in starting:
            preview = replace(preview, instance_refused=TaskLive(
                _("task %(task)s (%(flow)s) starts again above, on %(resource)s: a second run beside it would run "
                  "it twice") % {"task": preview.source.pk, "flow": preview.source.flow,
                                 "resource": starting[order]}, task_id=preview.source.pk))
        elif preview.refusal is None and order is not None:
            starting[order] = f"{resource.pool.resource_noun} {resource.key}"
        previews.append(preview)
    return previews
