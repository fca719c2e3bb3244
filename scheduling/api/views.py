"""A resource's atomic reset-and-retry (the users' POST /resources/{id}/retry) and its retry
history (GET /resources/{id}/retry_history): each calls one service or selector."""

import base64
import binascii
from urllib.parse import urlencode

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import exceptions, status
from rest_framework.response import Response

from resources.api.views import LOCATION, AddressedResource
from retryops.api.authentication import actor_of
from retryops.api.pagination import CursorPage
from retryops.api.schema import INSTANCE_SUCCEEDED
from retryops.api.views import ApiView
from retryops.inputs import MAX_ID
from retryops.masking import mask_secrets
from scheduling import services
from scheduling.api.serializers import (
    HistoryEntrySerializer,
    RetryHistorySerializer,
    RetrySerializer,
    TaskSerializer,
    TotalsSerializer,
)
from scheduling.models import Task
from scheduling.selectors import retry_history


def task_url(task: Task) -> str:
    """Where a task is read (GET /api/tasks/{id}/, the tasks endpoints)."""
    return f"/api/tasks/{task.pk}/"


class Retry(AddressedResource, ApiView):
    """Reset this resource and start a task on it now, in one transaction (strict, the default):
    nobody can claim it in between, and its history is appended to, never cleared. Flow, payload
    and policy default to those of the last task that ran on it. Refused with 409 when it cannot be
    had (resource_unavailable: the reason, who holds it and until when) or when a task that has not
    finished is bound to it (task_live: a retry would run that business instance twice). A retry that
    runs the last task's business instance again (its flow and payload) is refused while a run of it
    is live anywhere (task_live) or once one has succeeded (instance_succeeded), unless
    `as_new_instance` runs a succeeded one again as a new instance. Answers
    201 with the task, queued: it is in the database and runs when a worker takes it, also while
    Redis is down (the dispatcher then sends its wake-up)."""

    input_serializer, output_serializer = RetrySerializer, TaskSerializer
    required_permissions = {"POST": ["scheduling.retry_resource"]}
    error_notes = {409: INSTANCE_SUCCEEDED}

    @extend_schema(responses={201: TaskSerializer}, parameters=[LOCATION])
    def post(self, request, **kwargs):
        resource = self.get_resource()
        body = RetrySerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data, actor = body.validated_data, actor_of(request)
        if data["strict"]:
            task = services.retry_resource(resource=resource.pk, actor=actor, flow=data.get("flow"),
                                           payload=data.get("payload"), policy=data.get("policy"),
                                           as_new_instance=data["as_new_instance"])
        else:
            task = services.retry_on_resource_or_another(resource=resource.pk, actor=actor, flow=data.get("flow"),
                                                         payload=data.get("payload"), policy=data.get("policy"),
                                                         as_new_instance=data["as_new_instance"])
        # Its wake-up was sent (or not, with Redis down) when the service's transaction committed.
        task.rq_job_id = Task.objects.filter(pk=task.pk).values_list("rq_job_id", flat=True).first() or ""
        return Response(TaskSerializer(task).data, status=status.HTTP_201_CREATED,
                        headers={"Location": task_url(task)})


def _encode(before: tuple[int | None, int | None]) -> str:
    text = urlencode({name: bound for name, bound in zip("ae", before, strict=True) if bound is not None})
    return base64.urlsafe_b64encode(text.encode()).decode()


def _decode(cursor: str) -> tuple[int | None, int | None]:
    try:
        text = base64.urlsafe_b64decode(cursor.encode("ascii")).decode("ascii")
        pairs = dict(part.split("=", 1) for part in text.split("&") if part)
    except (UnicodeError, binascii.Error, ValueError):
        pairs = None
    if pairs is None or not set(pairs) <= {"a", "e"} or not all(
            value.isdigit() and 0 < int(value) <= MAX_ID for value in pairs.values()):
        raise exceptions.ValidationError({"cursor": ["not a cursor this API gave out: follow the next links"]})
    return tuple(int(pairs[name]) if name in pairs else None for name in "ae")


class RetryHistory(AddressedResource, ApiView):
    """The resource's timeline of attempts and events, newest first: time, kind, outcome, error,
    signature, category, task and actor of each, with its totals (successes, failures, consecutive
    failures, last failure) at the top. Cursor-paginated: follow `next`."""

    output_serializer = RetryHistorySerializer
    required_permissions = {"GET": ["resources.view_resource", "scheduling.view_attempt"]}

    @extend_schema(parameters=[
        OpenApiParameter("cursor", OpenApiTypes.STR, OpenApiParameter.QUERY, description="From a `next` link."),
        OpenApiParameter("page_size", CursorPage().page_size_schema(), OpenApiParameter.QUERY,
                         description=f"Entries per page, 1 to {CursorPage.max_page_size} (default "
                                     f"{CursorPage.page_size}).")])
    def get(self, request, **kwargs):
        cursor = request.query_params.get("cursor")
        before = _decode(cursor) if cursor else (None, None)
        page = retry_history(resource=self.get_resource(), before=before,
                             limit=CursorPage().get_page_size(request))
        next_url = None
        if page.before is not None:
            query = request.query_params.copy()
            query["cursor"] = _encode(page.before)
            next_url = request.build_absolute_uri(f"{request.path}?{query.urlencode()}")
        resource = page.resource
        # Plain dicts, not a serializer per entry: a page of 50 entries costs a twentieth of the
        # time. RetryHistorySerializer documents the same shape (tests compare the two).
        return Response({
            "totals": TotalsSerializer(resource).data,
            "resource": {"id": resource.pk, "pool": resource.pool.name, "key": resource.key},
            "next": next_url,
            "results": [entry_dict(entry) for entry in page.entries],
        })


ENTRY_FIELDS = list(HistoryEntrySerializer().fields)


def entry_dict(entry) -> dict:
    """A history entry as RetryHistorySerializer's `results` shows it (datetimes rendered by the
    JSON renderer, as DateTimeField renders them)."""
    return {name: getattr(entry, name) for name in ENTRY_FIELDS} | {"details": mask_secrets(entry.details)}
