"""Permissions: the admin's codenames, checked on the request's user (an API client's service
user, or the session's). Viewers read (view_*), operators act (resources.reset_resource,
scheduling.retry_resource, ...), approvers approve: whatever groups grant those codenames
(retryops/roles.py), the API asks for the codename, never for a group."""

from rest_framework import permissions


class Requires(permissions.BasePermission):
    """The user is authenticated and has every codename the view lists for the request's method
    in `required_permissions` ({"GET": [...], "POST": [...]}; a method it does not list needs
    authentication only)."""

    def has_permission(self, request, view) -> bool:
        if not (request.user and request.user.is_authenticated):
            return False
        needed = getattr(view, "required_permissions", {}).get(request.method, ())
        if request.method == "HEAD":
            needed = getattr(view, "required_permissions", {}).get("GET", ())
        if needed and not request.user.has_perms(needed):
            self.message = f"this action needs the permission{'s' if len(needed) > 1 else ''} {', '.join(needed)}"
            return False
        return True
