"""Pages that record one audit entry, on the paths the middleware tells apart (tests only)."""

from django.db import transaction
from django.http import JsonResponse
from django.urls import path
from rest_framework.authentication import BasicAuthentication
from rest_framework.permissions import IsAuthenticated
from rest_framework.response import Response
from rest_framework.views import APIView

from audit.services import record_audit
from resources.models import Resource


def reset_page(request, pk):
    with transaction.atomic():
        entry = record_audit(action="resource.reset", target=Resource.objects.get(pk=pk))
    return JsonResponse({"entry": entry.pk})


class ResetEndpoint(APIView):
    # Authenticated by DRF in the view, after every middleware has run.
    authentication_classes = [BasicAuthentication]
    permission_classes = [IsAuthenticated]

    def post(self, request, pk):
        with transaction.atomic():
            entry = record_audit(action="resource.reset", target=Resource.objects.get(pk=pk))
        return Response({"entry": entry.pk})


urlpatterns = [
    path("admin/reset/<int:pk>/", reset_page),
    path("console/reset/<int:pk>/", reset_page),
    path("api/resources/<int:pk>/reset/", ResetEndpoint.as_view()),
]
