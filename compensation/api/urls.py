"""The compensation endpoints, under /api/: dead letters and bulk replays (the dead-letter queue
inspector), work orders (/api/ops/workorders, the operators' own path) with their transitions and
runbook runs. Trailing slashes are optional, as on the resource endpoints."""

from django.urls import re_path

from compensation.api import views
from resources.api.urls import ID

WORK_ORDER = rf"ops/workorders/{ID}"
RUN = rf"ops/runbook-runs/{ID}"

urlpatterns = [
    re_path(r"^dead-letters/?$", views.DeadLetterList.as_view(), name="api-dead-letters"),
    re_path(r"^dead-letters/replay/?$", views.BulkReplayStart.as_view(), name="api-dead-letters-replay"),
    re_path(rf"^dead-letters/{ID}/?$", views.DeadLetterDetail.as_view(), name="api-dead-letter"),
    re_path(rf"^dead-letters/{ID}/replay/?$", views.Replay.as_view(), name="api-dead-letter-replay"),
    re_path(rf"^dead-letters/{ID}/discard/?$", views.Discard.as_view(), name="api-dead-letter-discard"),
    re_path(rf"^dead-letters/{ID}/resolve/?$", views.Resolve.as_view(), name="api-dead-letter-resolve"),
    re_path(r"^bulk-replays/?$", views.BulkReplayList.as_view(), name="api-bulk-replays"),
    re_path(rf"^bulk-replays/{ID}/?$", views.BulkReplayDetail.as_view(), name="api-bulk-replay"),
    re_path(rf"^bulk-replays/{ID}/cancel/?$", views.BulkReplayCancel.as_view(), name="api-bulk-replay-cancel"),
    re_path(r"^ops/workorders/?$", views.WorkOrderList.as_view(), name="api-work-orders"),
    re_path(rf"^{WORK_ORDER}/?$", views.WorkOrderDetail.as_view(), name="api-work-order"),
    re_path(rf"^{WORK_ORDER}/acknowledge/?$", views.Acknowledge.as_view(), name="api-work-order-acknowledge"),
    re_path(rf"^{WORK_ORDER}/start/?$", views.Start.as_view(), name="api-work-order-start"),
    re_path(rf"^{WORK_ORDER}/compensate/?$", views.Compensate.as_view(), name="api-work-order-compensate"),
    re_path(rf"^{WORK_ORDER}/close/?$", views.Close.as_view(), name="api-work-order-close"),
    re_path(rf"^{WORK_ORDER}/cancel/?$", views.CancelOrder.as_view(), name="api-work-order-cancel"),
    re_path(rf"^{WORK_ORDER}/runbook-runs/?$", views.RunbookRuns.as_view(), name="api-work-order-runbook-runs"),
    re_path(rf"^{RUN}/?$", views.RunbookRunDetail.as_view(), name="api-runbook-run"),
    re_path(rf"^{RUN}/approve/?$", views.Approve.as_view(), name="api-runbook-run-approve"),
    re_path(rf"^{RUN}/reject/?$", views.Reject.as_view(), name="api-runbook-run-reject"),
    re_path(rf"^{RUN}/run/?$", views.Run.as_view(), name="api-runbook-run-run"),
]
