"""The console's groups and their members.

Transactional tests elsewhere empty every table, groups included, between tests (post_migrate
brings the permissions back, not the groups), so the groups are made here again from the roles;
test_roles.py proves that the migration makes the same ones."""

import pytest
from django.apps import apps
from django.contrib.auth.models import Group, User
from django.test import Client

from retryops import roles

PASSWORD = "walk-pw-1"


@pytest.fixture
def console_groups(db) -> dict[str, Group]:
    roles.sync_groups(apps)
    return {group.name: group for group in Group.objects.filter(name__in=roles.ROLES)}


def member(username: str, *groups: str, superuser: bool = False) -> User:
    """A staff user in `groups` (none: staff and nothing else), or a superuser."""
    user = User.objects.create_user(username=username, password=PASSWORD, is_staff=True, is_superuser=superuser)
    user.groups.set(Group.objects.filter(name__in=groups))
    assert user.groups.count() == len(groups), f"no such group among {groups}"
    return user


def logged_in(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client
