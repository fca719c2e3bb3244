"""Console users: a viewer (may look), an operator (may reset and quarantine), and a page's HTML."""

import pytest
from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from tests.factories import ResourceFactory


def console_user(django_user_model, username, *codenames):
    user = django_user_model.objects.create_user(username=username, password="x", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(content_type__app_label="resources",
                                                         codename__in=codenames))
    return user


def logged_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def viewer(db, django_user_model):
    return logged_in(console_user(django_user_model, "vera", "view_resource"))


@pytest.fixture
def operator(db, django_user_model):
    return logged_in(console_user(django_user_model, "olga", "view_resource", "reset_resource",
                                  "quarantine_resource"))


@pytest.fixture
def list_url():
    return reverse("admin:resources_resource_changelist")


def change_url(resource) -> str:
    return reverse("admin:resources_resource_change", args=[resource.pk])


def failed(pool, key, reason="TimeoutError: read timed out after 30s", *, at=None, in_a_row=1,
           category="retryable", **fields):
    """A failed resource of `pool`, as the services leave one after `in_a_row` failures."""
    return ResourceFactory(pool=pool, key=key, state="failed", failure_count=in_a_row, consecutive_failures=in_a_row,
                           last_failure_reason=reason, last_failure_category=category,
                           last_failure_at=at or timezone.now(), **fields)
