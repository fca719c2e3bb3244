"""The API's own endpoints and a probe endpoint that writes one audit entry (tests only)."""

import threading

from django.db import transaction
from django.urls import include, path
from rest_framework import serializers
from rest_framework.response import Response

from audit.services import Target, record_audit
from retryops.api.authentication import actor_of
from retryops.api.fields import Input, Text
from retryops.api.views import ApiView
from retryops.errors import DomainError

# A POST named "wait" says it is waiting, then waits until a test lets it proceed.
waiting, proceed = threading.Event(), threading.Event()


class ProbeSerializer(Input):
    name = Text(max_length=20)
    count = serializers.IntegerField(min_value=0, max_value=10, required=False)


class Probe(ApiView):
    serializer_class = ProbeSerializer
    required_permissions = {"GET": ["resources.view_resource"], "POST": ["resources.change_resource"]}

    def get(self, request):
        return Response({"ok": True})

    def post(self, request):
        data = self.get_serializer(data=request.data)
        data.is_valid(raise_exception=True)
        name = data.validated_data["name"]
        if name == "boom":
            raise RuntimeError("a bug")
        if name == "wait":
            waiting.set()
            proceed.wait(10)
        if name == "refuse":
            raise DomainError("account alice@x is in use", code="resource_unavailable", reason="in_use")
        with transaction.atomic():
            entry = record_audit(action="pool.change", target=Target("probe", name), actor=actor_of(request))
        return Response({"entry": entry.pk, "name": name}, status=201, headers={"Location": f"/api/probe/{entry.pk}"})


urlpatterns = [
    path("api/", include("retryops.api.urls")),
    path("api/probe/", Probe.as_view()),
]
