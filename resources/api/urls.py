"""The resource endpoints, under /api/. A resource is addressed by its id or by its pool's name
and its key; `resource_paths` mounts an action at both, for scheduling's endpoints too. Trailing
slashes are optional (external systems write /claim and /claim/ alike)."""

from django.urls import re_path

from resources.api import views

# An id has at most 18 digits (any such number fits a bigint): a longer one names nothing (404).
ID = r"(?P<id>[1-9][0-9]{0,17})"
POOL = r"(?P<pool>[^/]+)"
KEY = r"(?P<key>[^/]+)"


def resource_paths(action: str, view, name: str) -> list:
    """`action` of a resource at /api/resources/<id>/<action> and /api/pools/<pool>/resources/<key>/<action>
    (the resource itself for an empty `action`)."""
    tail = f"/{action}" if action else ""
    return [
        re_path(rf"^resources/{ID}{tail}/?$", view, name=f"api-{name}"),
        re_path(rf"^pools/{POOL}/resources/{KEY}{tail}/?$", view, name=f"api-{name}-by-key"),
    ]


urlpatterns = [
    re_path(r"^pools/?$", views.PoolList.as_view(), name="api-pools"),
    re_path(rf"^pools/{POOL}/?$", views.PoolDetail.as_view(), name="api-pool"),
    re_path(r"^resources/?$", views.ResourceList.as_view(), name="api-resources"),
    re_path(r"^resources/claim_next/?$", views.ClaimNext.as_view(), name="api-claim-next"),
    *resource_paths("", views.ResourceDetail.as_view(), "resource"),
    *resource_paths("claim", views.Claim.as_view(), "claim"),
    *resource_paths("release", views.Release.as_view(), "release"),
    *resource_paths("heartbeat", views.Heartbeat.as_view(), "heartbeat"),
    *resource_paths("reset", views.Reset.as_view(), "reset"),
    *resource_paths("quarantine", views.Quarantine.as_view(), "quarantine"),
    *resource_paths("unquarantine", views.Unquarantine.as_view(), "unquarantine"),
]
