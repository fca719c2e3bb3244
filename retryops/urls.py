from django.contrib import admin
from django.urls import include, path
from django.utils.translation import gettext_lazy as _

from compensation import dashboard
from retryops import rq_dashboard
from telemetry.figures import admin as admin_figures

admin.site.site_header = _("RetryOps console")
admin.site.site_title = _("RetryOps")
# The console is the whole site: no "View site" link to a page that does not exist.
admin.site.site_url = None
# The resource list's twelve columns and its filters need the width at 1366 px that the app
# sidebar would take; the index and the breadcrumbs lead everywhere it did.
admin.site.enable_nav_sidebar = False

urlpatterns = [
    # The console's language switcher posts here (templates/admin/base_site.html).
    path("i18n/", include("django.conf.urls.i18n")),
    # /metrics, /healthz, /readyz.
    path("", include("telemetry.urls")),
    # django-rq's pages, readable by the console's groups; its buttons are the superusers'.
    path("admin/rq/", rq_dashboard.urls()),
    # The ops dashboard's fragment, which the admin index's panel fetches (templates/admin/index.html).
    path("admin/dashboard/", admin.site.admin_view(dashboard.fragment), name="ops_dashboard"),
    # The acceptance figures: their page, and the admin index's panel of them.
    path("admin/figures/", admin.site.admin_view(admin_figures.page), name="acceptance_figures"),
    path("admin/figures/panel/", admin.site.admin_view(admin_figures.panel), name="acceptance_figures_panel"),
    path("admin/", admin.site.urls),
    # The REST API: its own endpoints (schema, docs, health), then each app's.
    path("api/", include("retryops.api.urls")),
    path("api/", include("scheduling.api.task_urls")),
    path("api/", include("compensation.api.urls")),
    path("api/", include("resources.api.urls")),
    path("api/", include("scheduling.api.urls")),
]

# An unknown /api/ path answers in the API's error shape (with DEBUG off; retryops.api.views).
handler404 = "retryops.api.views.not_found"
