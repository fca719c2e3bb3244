"""django-rq's dashboard, mounted at /admin/rq/ (the ops dashboard links to it).

django-rq lets any staff user empty a queue or delete, requeue, enqueue and stop jobs. Those
change Redis behind the services' back, with no audit entry, so here only a superuser may post
to it; reading it takes the permission the ops dashboard takes (the viewers have it). Its
stats.json keeps django-rq's own check (staff, or RQ_API_TOKEN), for monitoring."""

from functools import wraps

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.urls import include
from django_rq.urls import get_admin_urlpatterns, get_api_urlpatterns

READ_PERMISSION = "scheduling.view_task"
SAFE_METHODS = ("GET", "HEAD")


def may(request) -> bool:
    if request.method in SAFE_METHODS:
        return request.user.has_perm(READ_PERMISSION)
    return request.user.is_superuser


def guarded(view):
    @wraps(view)
    def checked(request, *args, **kwargs):
        if not may(request):
            raise PermissionDenied
        return view(request, *args, **kwargs)

    return admin.site.admin_view(checked)


def urls():
    """What include("django_rq.urls") gives, in its namespace, each page behind `may`."""
    return include((get_api_urlpatterns() + get_admin_urlpatterns(view_wrapper=guarded), "django_rq"))
