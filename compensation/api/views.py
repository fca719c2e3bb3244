"""The compensation endpoints. Each parses its input, calls one service or selector, and answers
the result or the service's refusal (retryops.api.errors renders DomainErrors).

The dead letters and bulk replays are the dead-letter queue inspector: with the feature flag
dlq-inspector off they answer 404 feature_off, as its admin pages and commands are off. Work
orders and their runbook runs stay (the on-call is still paged about them)."""

import uuid

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import mixins, status
from rest_framework.response import Response

from compensation.api.serializers import (
    BulkReplayCountSerializer,
    BulkReplayRequestSerializer,
    BulkReplaySerializer,
    CloseSerializer,
    CompensateSerializer,
    DeadLetterDetailSerializer,
    DeadLetterSerializer,
    NoBodySerializer,
    ReplaySerializer,
    RequiredReasonSerializer,
    RunbookRequestSerializer,
    RunbookRunSerializer,
    SettleSerializer,
    StartSerializer,
    WorkOrderDetailSerializer,
    WorkOrderOpenSerializer,
    WorkOrderPatchSerializer,
    WorkOrderSerializer,
)
from compensation.filtersets import (
    DeadLetterFilterSet,
    RunbookRunFilterSet,
    WorkOrderFilterSet,
)
from compensation.flags import require_dlq_inspector
from compensation.models import BulkReplay, DeadLetter
from compensation.runbooks import services as runbooks
from compensation.runbooks.models import RunbookRun
from compensation.selectors import (
    get_bulk_replay,
    get_dead_letter,
    get_runbook_run,
    runbook_runs_for,
    work_order_detail,
)
from compensation.services.bulk_replay import bulk_replay_preview, cancel_bulk_replay, start_bulk_replay
from compensation.services.dead_letters import discard_dead_letter, resolve_dead_letter
from compensation.services.replay import replay_dead_letter
from compensation.work_orders import services as work_orders
from compensation.work_orders.models import WorkOrder
from resources.api.views import LOCATION
from retryops.api.authentication import actor_of
from retryops.api.schema import error_response
from retryops.api.views import ApiView, parsed

P = "compensation."
VIEW_DEAD_LETTERS, REPLAY, DISCARD = P + "view_deadletter", P + "replay_deadletter", P + "discard_deadletter"
VIEW_BULK, START_BULK, CANCEL_BULK = P + "view_bulkreplay", P + "add_bulkreplay", P + "change_bulkreplay"
VIEW_ORDERS, OPEN_ORDER, CHANGE_ORDER = P + "view_workorder", P + "add_workorder", P + "change_workorder"
VIEW_RUNS, RUN, APPROVE = P + "view_runbookrun", P + "run_runbook_action", P + "approve_runbookrun"

ACCEPTED_LOCATION = OpenApiParameter("Location", OpenApiTypes.STR, OpenApiParameter.HEADER, response=[202],
                                     description="Where its progress is read.")


class DlqInspector:
    """Mixed into the dead-letter queue's views: 404 feature_off while the flag dlq-inspector is
    off, checked after authentication and permissions (a stranger learns nothing) and before any
    work or idempotency key."""

    error_statuses = (404,)

    def check_permissions(self, request):
        super().check_permissions(request)
        require_dlq_inspector()


class ListView(mixins.ListModelMixin, ApiView):
    """A cursor-paginated list of `queryset`, filtered by `filterset_class`."""

    def get(self, request, **kwargs):
        return self.list(request)


class DetailView(ApiView):
    """One row by the id in its path: `read(id)` finds it (NotFound: 404), `serializer_class` renders it."""

    def get(self, request, id):
        return Response(self.serializer_class(self.read(int(id))).data)


class RowAction(ApiView):
    """A POST that calls one service on the row in its path: `input_serializer` parses the body,
    `act` calls the service with the row's id, `output_serializer` renders what it returns."""

    input_serializer = NoBodySerializer

    def act(self, row_id: int, actor: str, data: dict):
        raise NotImplementedError

    def post(self, request, id):
        done = self.act(int(id), actor_of(request), parsed(self.input_serializer, request))
        return Response(self.output_serializer(done).data)


# Dead letters


class DeadLetterList(DlqInspector, ListView):
    """Dead letters, newest first (cursor-paginated), filtered by flow, error signature, pool,
    resource, state and when they died: the same filters as a bulk replay's."""

    queryset = DeadLetter.objects.select_related("pool", "resource")
    serializer_class = DeadLetterSerializer
    filterset_class = DeadLetterFilterSet
    required_permissions = {"GET": [VIEW_DEAD_LETTERS]}


class DeadLetterDetail(DlqInspector, DetailView):
    """One dead letter, with the payload a replay runs again."""

    serializer_class = DeadLetterDetailSerializer
    read = staticmethod(get_dead_letter)
    required_permissions = {"GET": [VIEW_DEAD_LETTERS]}


class Replay(DlqInspector, RowAction):
    """Replay an open dead letter: a new task for its flow and payload, which it then follows
    (replaying; replayed when that task succeeds, open again when it dies). Strict by default: on
    its own resource through the operator's retry of that resource (reset if it failed); 409
    replay_refused with the reason (quarantined, consumed, removed, in_use, task_live, succeeded)
    when it cannot run there, rather than elsewhere by surprise. With any_resource, on any resource
    of its pool. A dead letter that is not open: 409 illegal_transition."""

    input_serializer, output_serializer = ReplaySerializer, DeadLetterSerializer
    required_permissions = {"POST": [REPLAY]}

    def act(self, row_id, actor, data):
        return replay_dead_letter(dead_letter=row_id, actor=actor, **data)


class Discard(DlqInspector, RowAction):
    """Nothing is to be done about an open dead letter: discarded (kept until the clean-up purges it)."""

    input_serializer, output_serializer = SettleSerializer, DeadLetterSerializer
    required_permissions = {"POST": [DISCARD]}

    def act(self, row_id, actor, data):
        return discard_dead_letter(dead_letter=row_id, actor=actor, reason=data["reason"])


class Resolve(DlqInspector, RowAction):
    """An open dead letter was taken care of outside a replay (compensated by hand): resolved."""

    input_serializer, output_serializer = SettleSerializer, DeadLetterSerializer
    required_permissions = {"POST": [DISCARD]}

    def act(self, row_id, actor, data):
        return resolve_dead_letter(dead_letter=row_id, actor=actor, reason=data["reason"])


# Bulk replays


class BulkReplayStart(DlqInspector, ApiView):
    """Replay the open dead letters matching a filter. By default (dry_run), 200 and how many it
    would replay now, nothing started. With "dry_run": false, 202: the bulk replay is started (its runner replays at
    most `rate` a second, each one as a single replay would, counting refusals), with its id and
    its progress at Location. 409 bulk_replay_running while one with the same filter runs."""

    input_serializer = BulkReplayRequestSerializer
    required_permissions = {"POST": [START_BULK]}

    @extend_schema(operation_id="dead_letters_bulk_replay", responses={
        200: BulkReplayCountSerializer, 202: BulkReplaySerializer}, parameters=[ACCEPTED_LOCATION])
    def post(self, request):
        data = parsed(BulkReplayRequestSerializer, request)
        if data["dry_run"]:
            return Response({"dry_run": True, "count": bulk_replay_preview(filter=dict(data["filter"]))})
        bulk = start_bulk_replay(filter=dict(data["filter"]), rate=data.get("rate"),
                                 any_resource=data["any_resource"], everything=data["all"],
                                 actor=actor_of(request))
        return Response(BulkReplaySerializer(bulk).data, status=status.HTTP_202_ACCEPTED,
                        headers={"Location": f"/api/bulk-replays/{bulk.pk}/"})


class BulkReplayList(DlqInspector, ListView):
    """Bulk replays, newest first (cursor-paginated)."""

    queryset = BulkReplay.objects.all()
    serializer_class = BulkReplaySerializer
    required_permissions = {"GET": [VIEW_BULK]}


class BulkReplayDetail(DlqInspector, DetailView):
    """A bulk replay's progress."""

    serializer_class = BulkReplaySerializer
    read = staticmethod(get_bulk_replay)
    required_permissions = {"GET": [VIEW_BULK]}


class BulkReplayCancel(DlqInspector, RowAction):
    """Stop a running bulk replay; the replays it started go on. 409 illegal_transition once it ended."""

    output_serializer = BulkReplaySerializer
    required_permissions = {"POST": [CANCEL_BULK]}

    def act(self, row_id, actor, data):
        return cancel_bulk_replay(bulk_replay=row_id, actor=actor)


# Work orders


class WorkOrderList(ListView):
    """Work orders, newest first (cursor-paginated), filtered by state, source, flow, error
    signature, pool, assignee and when they were opened; POST opens one by hand."""

    queryset = WorkOrder.objects.select_related("pool")
    serializer_class = WorkOrderSerializer
    filterset_class = WorkOrderFilterSet
    required_permissions = {"GET": [VIEW_ORDERS], "POST": [OPEN_ORDER]}

    @extend_schema(request=WorkOrderOpenSerializer, responses={201: WorkOrderSerializer}, parameters=[LOCATION])
    def post(self, request):
        """Open a work order by hand, for a case no dead letter opened: the on-call is paged."""
        order = work_orders.open_work_order(**parsed(WorkOrderOpenSerializer, request), actor=actor_of(request))
        return Response(WorkOrderSerializer(order).data, status=status.HTTP_201_CREATED,
                        headers={"Location": f"/api/ops/workorders/{order.pk}/"})


class WorkOrderDetail(DetailView):
    """One work order with its SLA clocks and its dead letters' states; PATCH changes what an operator
    edits on a live one (assignee, runbook, notes, resolution); its state changes through the
    transitions (POST .../acknowledge, start, compensate, close, cancel)."""

    serializer_class = WorkOrderDetailSerializer
    read = staticmethod(work_order_detail)
    required_permissions = {"GET": [VIEW_ORDERS], "PATCH": [CHANGE_ORDER]}

    @extend_schema(request=WorkOrderPatchSerializer, responses={
        200: WorkOrderSerializer,
        409: error_response(409, "illegal_transition: the work order is closed, compensated or cancelled, and "
                                 "no longer changes.")})
    def patch(self, request, id):
        order = work_orders.change_work_order(work_order=int(id), actor=actor_of(request),
                                              **parsed(WorkOrderPatchSerializer, request))
        return Response(WorkOrderSerializer(order).data)


class Transition(RowAction):
    """A work order's transition; 409 illegal_transition, naming its state and the states it may
    leave from, when its state does not allow it."""

    output_serializer = WorkOrderSerializer
    required_permissions = {"POST": [CHANGE_ORDER]}


class Acknowledge(Transition):
    """The on-call has seen it (open -> acknowledged): stops the acknowledge clock; it is assigned
    to the caller if nobody has it."""

    def act(self, row_id, actor, data):
        return work_orders.acknowledge_work_order(work_order=row_id, actor=actor)


class Start(Transition):
    """Compensation is under way (open or acknowledged -> in_progress), following `runbook` when named."""

    input_serializer = StartSerializer

    def act(self, row_id, actor, data):
        return work_orders.start_work_order(work_order=row_id, actor=actor, runbook=data.get("runbook"))


class Compensate(Transition):
    """The business effects are repaired (acknowledged or in_progress -> compensated); its open dead
    letters are resolved."""

    input_serializer = CompensateSerializer

    def act(self, row_id, actor, data):
        return work_orders.compensate_work_order(work_order=row_id, actor=actor, resolution=data["resolution"])


class Close(Transition):
    """Nothing (more) to compensate (any live state -> closed); its open dead letters are resolved."""

    input_serializer = CloseSerializer

    def act(self, row_id, actor, data):
        return work_orders.close_work_order(work_order=row_id, actor=actor, resolution=data["resolution"])


class CancelOrder(Transition):
    """Opened by mistake (any live state -> cancelled); its dead letters stay open for another work order."""

    input_serializer = RequiredReasonSerializer

    def act(self, row_id, actor, data):
        return work_orders.cancel_work_order(work_order=row_id, actor=actor, reason=data["reason"])


# Runbook runs


class RunbookRuns(ListView):
    """A work order's runbook runs, newest first (cursor-paginated); POST asks to run an action of
    a runbook for it: an internal action is ready to run at once (state approved), an external one
    waits for another operator's approval (requested). The same token again answers the first run
    with 200, creating nothing (409 token_reused for another request)."""

    serializer_class = RunbookRunSerializer
    filterset_class = RunbookRunFilterSet
    required_permissions = {"GET": [VIEW_RUNS], "POST": [RUN]}

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # the schema's generator asks, with no work order
            return RunbookRun.objects.none()
        return runbook_runs_for(int(self.kwargs["id"]))

    @extend_schema(request=RunbookRequestSerializer, parameters=[LOCATION], responses={
        201: RunbookRunSerializer,
        200: OpenApiResponse(RunbookRunSerializer, description="The token names a run requested before, with the "
                                                               "same request: that run, as it is now; nothing new.")})
    def post(self, request, id):
        data = parsed(RunbookRequestSerializer, request)
        run, first = runbooks.request_runbook_action(
            work_order=int(id), runbook=data["runbook"], action=data["action"], input=data["input"],
            token=data.get("token") or uuid.uuid4().hex, actor=actor_of(request))
        if not first:
            return Response(RunbookRunSerializer(run).data)
        return Response(RunbookRunSerializer(run).data, status=status.HTTP_201_CREATED,
                        headers={"Location": f"/api/ops/runbook-runs/{run.pk}/"})


class RunbookRunDetail(DetailView):
    """One runbook run and its outcome."""

    serializer_class = RunbookRunSerializer
    read = staticmethod(get_runbook_run)
    required_permissions = {"GET": [VIEW_RUNS]}


class Approve(RowAction):
    """Approve another operator's external action (requested -> approved). 403 four_eyes for the
    operator who requested it; 409 illegal_transition when it does not wait for approval."""

    output_serializer = RunbookRunSerializer
    required_permissions = {"POST": [APPROVE]}

    def act(self, row_id, actor, data):
        return runbooks.approve_runbook_action(run=row_id, actor=actor)


class Reject(RowAction):
    """Turn down (an approver) or withdraw (an operator) a run that has not started; `reason` says why."""

    input_serializer, output_serializer = RequiredReasonSerializer, RunbookRunSerializer
    required_permissions = {"POST": []}

    def check_permissions(self, request):
        super().check_permissions(request)
        if not (request.user.has_perm(APPROVE) or request.user.has_perm(RUN)):
            self.permission_denied(request, message=f"this action needs the permission {APPROVE} or {RUN}")

    def act(self, row_id, actor, data):
        return runbooks.reject_runbook_action(run=row_id, actor=actor, reason=data["reason"])


class Run(RowAction):
    """Run a ready action now and answer its outcome (succeeded with its result, or failed with its
    error); a success moves an open or acknowledged work order to in_progress. 409
    approval_required for an external action not approved yet; 409 illegal_transition for a run
    that started already or was rejected."""

    output_serializer = RunbookRunSerializer
    required_permissions = {"POST": [RUN]}

    def act(self, row_id, actor, data):
        return runbooks.run_runbook_action(run=row_id, actor=actor)
