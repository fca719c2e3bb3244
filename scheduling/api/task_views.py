"""The task endpoints. Each parses its input, calls one service or selector, and answers the
result or the service's refusal (retryops.api.errors renders DomainErrors)."""

from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status
from rest_framework.response import Response

from resources.api.views import LOCATION
from retryops.api.authentication import actor_of
from retryops.api.errors import domain_error_body, status_for
from retryops.api.views import ApiView, parsed
from scheduling import services
from scheduling.api.serializers import TaskSerializer
from scheduling.api.task_serializers import (
    CancelSerializer,
    EmptySerializer,
    TaskCreateSerializer,
    TaskDetailSerializer,
    TaskRetryBatchSerializer,
    TaskRetryRequestSerializer,
)
from scheduling.api.views import task_url
from scheduling.filtersets import TaskFilterSet
from scheduling.models import Task
from scheduling.selectors import get_task_with_attempts

VIEW = "scheduling.view_task"
RETRY, CANCEL, RUN_NOW = "scheduling.retry_resource", "scheduling.cancel_task", "scheduling.run_task_now"


def with_wake_up(task: Task) -> Task:
    """The task with its wake-up as sent once the service's transaction committed (or not, with
    Redis down): what its answer's wake_up_sent says."""
    task.rq_job_id = Task.objects.filter(pk=task.pk).values_list("rq_job_id", flat=True).first() or ""
    return task


class TaskList(mixins.ListModelMixin, ApiView):
    """Tasks, newest first (cursor-paginated), filtered by state, flow, pool, resource and the time
    they were created or last changed; POST starts one."""

    queryset = Task.objects.select_related("pool", "policy")
    serializer_class = TaskSerializer
    filterset_class = TaskFilterSet
    required_permissions = {"GET": [VIEW], "POST": [RETRY]}

    def get(self, request):
        return self.list(request)

    @extend_schema(request=TaskCreateSerializer, responses={201: TaskSerializer}, parameters=[LOCATION])
    def post(self, request):
        """Start a task: its first attempt is queued once it is written (queued: true), also while Redis
        does not answer (the dispatcher sends the wake-up later). With a resource and strict (the
        default), every attempt runs on that resource or fails."""
        data = parsed(TaskCreateSerializer, request)
        task = services.start_task(flow=data["flow"], pool_name=data["pool"], payload=data.get("payload"),
                                   policy=data.get("policy"), resource=data.get("resource"), strict=data["strict"],
                                   run_at=data.get("run_at"), created_by=actor_of(request))
        return Response(TaskSerializer(with_wake_up(task)).data, status=status.HTTP_201_CREATED,
                        headers={"Location": task_url(task)})


class TaskDetail(ApiView):
    """One task with its attempts, first to last."""

    serializer_class = TaskDetailSerializer
    required_permissions = {"GET": [VIEW]}

    def get(self, request, id):
        return Response(TaskDetailSerializer(get_task_with_attempts(int(id))).data)


class TaskAction(ApiView):
    """A POST that calls one service on the task in its path: `input_serializer` parses the body,
    `act` calls the service; the answer is the task as the service left it."""

    input_serializer = EmptySerializer
    output_serializer = TaskSerializer

    def act(self, task_id: int, actor: str, data: dict) -> Task:
        raise NotImplementedError

    def post(self, request, id):
        task = self.act(int(id), actor_of(request), parsed(self.input_serializer, request))
        return Response(TaskSerializer(with_wake_up(task)).data)


class Cancel(TaskAction):
    """Cancel a task waiting for its next attempt (pending, scheduled, retrying): it never runs again
    and a resource it holds goes back to its pool. A running, finished or cancelled task: 409
    illegal_transition (a running attempt's side effects are under way: cancel its retry once it ends)."""

    input_serializer = CancelSerializer
    required_permissions = {"POST": [CANCEL]}

    def act(self, task_id, actor, data):
        return services.cancel_task(task=task_id, actor=actor, reason=data["reason"])


class RunNow(TaskAction):
    """Run a waiting task's next attempt now instead of when it is due; 409 illegal_transition for a
    task that is not waiting."""

    required_permissions = {"POST": [RUN_NOW]}

    def act(self, task_id, actor, data):
        return services.run_task_now(task=task_id, actor=actor)


class RetryTasks(ApiView):
    """Retry tasks by id, for internal callers: each task's business instance runs again in a new
    task, strictly on the resource its last attempt ran on (else the one it asked for), which is
    reset if it failed, as the console's "retry this resource" from a task's page does, with its
    audit entry. Always 200 once the body is good, with one result per id in the order sent:
    `status` 201 and the new task, or the status and error that id alone would have answered
    (404 task_not_found; 409 task_live, resource_unavailable, instance_succeeded, unless
    `as_new_instance` runs a succeeded instance again as a new one; 400 when it has no resource)."""

    input_serializer, output_serializer = TaskRetryRequestSerializer, TaskRetryBatchSerializer
    required_permissions = {"POST": [RETRY]}

    def post(self, request):
        data = parsed(TaskRetryRequestSerializer, request)
        outcomes = services.retry_tasks(tasks=data.get("tasks") or [data["task"]], actor=actor_of(request),
                                        as_new_instance=data["as_new_instance"])
        results = [
            {"task": outcome.task_id, "status": 201, "retry": TaskSerializer(with_wake_up(outcome.retry)).data,
             "error": None}
            if outcome.error is None else
            {"task": outcome.task_id, "status": status_for(outcome.error.code), "retry": None,
             "error": domain_error_body(outcome.error)["error"]}
            for outcome in outcomes]
        retried = sum(outcome.error is None for outcome in outcomes)
        return Response({"retried": retried, "refused": len(outcomes) - retried, "results": results})
