"""Fixtures of the REST API's tests (tests/*/api/): API clients whose service users hold given
permissions, and DRF test clients that send their keys."""

import pytest
from django.contrib.auth.models import Permission
from rest_framework.test import APIClient

from audit import keycache
from audit.services import create_api_client

# What the roles grant (retryops/roles.py); the API asks for these codenames, never for a group.
VIEW = ["resources.view_resourcepool", "resources.view_resource", "scheduling.view_task", "scheduling.view_attempt"]
OPERATE = [*VIEW, "resources.add_resourcepool", "resources.add_resource", "resources.change_resource",
           "resources.claim_resource", "resources.reset_resource", "resources.quarantine_resource",
           "scheduling.retry_resource", "scheduling.cancel_task", "scheduling.run_task_now"]


def grant(user, *codenames: str) -> None:
    for codename in codenames:
        app_label, name = codename.split(".")
        user.user_permissions.add(Permission.objects.get(content_type__app_label=app_label, codename=name))


def keyed_client(key: str | None) -> APIClient:
    client = APIClient()
    if key:
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return client


@pytest.fixture
def keys_kept(monkeypatch):
    """The process keeps the clients it authenticated for a minute instead of half a second: a
    test that counts a request's queries after a warm-up request then holds however long the
    machine (busy, 2 cores) takes between the two."""
    monkeypatch.setattr(keycache, "KEY_CACHE_SECONDS", 60.0)


@pytest.fixture
def make_api_client(django_user_model):
    """make_api_client(name, *codenames) -> (ApiClient row, its key)."""

    def make(name: str, *codenames: str):
        user = django_user_model.objects.get_or_create(username=f"svc-{name}")[0]
        grant(user, *codenames)
        return create_api_client(name=name, user=user, actor="test")

    return make


@pytest.fixture
def operator_key(make_api_client) -> str:
    """The key of "billing", an external system allowed what operators may do."""
    return make_api_client("billing", *OPERATE)[1]


@pytest.fixture
def api(operator_key) -> APIClient:
    return keyed_client(operator_key)


@pytest.fixture
def viewer_api(make_api_client) -> APIClient:
    """An external system that may only read ("reports")."""
    return keyed_client(make_api_client("reports", *VIEW)[1])
