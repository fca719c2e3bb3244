"""The task endpoints, under /api/: tasks, their cancel and run-now actions, and the internal
retry of tasks by id. Trailing slashes are optional, as on the resource endpoints."""

from django.urls import re_path

from resources.api.urls import ID
from scheduling.api import task_views as views

urlpatterns = [
    re_path(r"^tasks/?$", views.TaskList.as_view(), name="api-tasks"),
    re_path(rf"^tasks/{ID}/?$", views.TaskDetail.as_view(), name="api-task"),
    re_path(rf"^tasks/{ID}/cancel/?$", views.Cancel.as_view(), name="api-task-cancel"),
    re_path(rf"^tasks/{ID}/run_now/?$", views.RunNow.as_view(), name="api-task-run-now"),
    re_path(r"^internal/tasks/retry/?$", views.RetryTasks.as_view(), name="api-internal-task-retry"),
]
