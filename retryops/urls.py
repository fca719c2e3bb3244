from django.contrib import admin
from django.urls import include, path

from compensation import dashboard

urlpatterns = [
    path("admin/rq/", include("django_rq.urls")),
    # The ops dashboard's fragment, which the admin index's panel fetches (templates/admin/index.html).
    path("admin/dashboard/", admin.site.admin_view(dashboard.fragment), name="ops_dashboard"),
    path("admin/", admin.site.urls),
]
