"""The bases every app's endpoints derive from, and the API's own 404."""

from rest_framework import generics

from retryops.api.errors import error_body
from retryops.api.idempotency import Idempotent


class ApiView(Idempotent, generics.GenericAPIView):
    """An endpoint: authenticated, its permissions in `required_permissions`, its POSTs idempotent."""

    def get_serializer_class(self):
        # An action view names what it parses and answers (input_serializer, output_serializer),
        # not one serializer_class: DRF's answer to OPTIONS describes what it takes.
        if self.serializer_class is None:
            named = getattr(self, "input_serializer", None) or getattr(self, "output_serializer", None)
            if named is not None:
                return named
        return super().get_serializer_class()


def parsed(serializer_class, request) -> dict:
    """The request's body as `serializer_class` validates it; 400 bad_input naming each bad field."""
    serializer = serializer_class(data=request.data)
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


def not_found(request, exception=None):
    """handler404: an unknown /api/ path answers in the API's error shape; any other page as Django does."""
    from django.http import JsonResponse
    from django.views.defaults import page_not_found

    if request.path_info.startswith("/api/"):
        return JsonResponse(error_body("not_found", f"no endpoint {request.path_info}"), status=404)
    return page_not_found(request, exception)
