"""Who may do what rests on users, groups and permissions: each change to them is audited, whichever
path made it (the admin, a command, the shell), in the transaction of the change, and a password
is never written into the log (only that it changed)."""

import json
import os
from io import StringIO
from unittest import mock

import pytest
from django.contrib.auth.models import Group, Permission, User
from django.core.management import call_command
from django.db import transaction
from django.urls import reverse

from audit.choices import AuditAction
from audit.context import acting_as
from audit.management.base import os_user
from audit.models import AuditEntry

pytestmark = pytest.mark.django_db

PASSWORD = "s3cret-horse-battery"


def entries(action: str | None = None) -> list[AuditEntry]:
    found = AuditEntry.objects.filter(target_type__in=["auth.user", "auth.group"]).order_by("id")
    return list(found.filter(action=action) if action else found)


def the_entry(action: str) -> AuditEntry:
    found = entries(action)
    assert len(found) == 1, [(entry.action, entry.before, entry.after) for entry in entries()]
    return found[0]


def permission(codename: str) -> Permission:
    return Permission.objects.get(codename=codename)


@pytest.fixture
def alice(db) -> User:
    with acting_as(actor="setup", channel="command"):
        return User.objects.create_user(username="alice", password=PASSWORD)


@pytest.fixture
def ops(db) -> Group:
    with acting_as(actor="setup", channel="command"):
        return Group.objects.create(name="night shift")


def since_setup() -> list[AuditEntry]:
    return [entry for entry in entries() if entry.actor != "setup"]


# users


def test_a_user_created_in_the_shell_is_audited_without_their_password():
    user = User.objects.create_user(username="alice", password=PASSWORD, email="alice@example.com")
    entry = the_entry(AuditAction.USER_CREATE)
    assert (entry.target_type, entry.target_id, entry.before) == ("auth.user", str(user.pk), None)
    assert entry.after == {"username": "alice", "email": "alice@example.com", "first_name": "", "last_name": "",
                           "is_active": True, "is_staff": False, "is_superuser": False, "sign_in": "password"}
    assert (entry.actor, entry.channel) == (os_user(), "command")
    stored = json.dumps([entry.before, entry.after, entry.reason])
    assert PASSWORD not in stored and user.password not in stored


def test_making_a_user_staff_is_audited_with_before_and_after(alice):
    alice.is_staff = True
    alice.save()
    entry = the_entry(AuditAction.USER_CHANGE)
    assert (entry.before["is_staff"], entry.after["is_staff"]) == (False, True)


def test_making_a_user_superuser_or_inactive_is_audited(alice):
    alice.is_superuser, alice.is_active = True, False
    alice.save(update_fields=["is_superuser", "is_active"])
    entry = the_entry(AuditAction.USER_CHANGE)
    assert (entry.before["is_superuser"], entry.before["is_active"]) == (False, True)
    assert (entry.after["is_superuser"], entry.after["is_active"]) == (True, False)


def test_a_password_change_is_audited_as_a_new_password_never_its_value(alice):
    alice.set_password("another-long-pass")
    alice.save()
    entry = the_entry(AuditAction.USER_CHANGE)
    assert (entry.before["sign_in"], entry.after["sign_in"]) == ("password", "new password")
    stored = json.dumps([entry.before, entry.after])
    assert "another-long-pass" not in stored and alice.password not in stored


def test_a_password_made_unusable_is_audited(alice):
    alice.set_unusable_password()
    alice.save()
    assert the_entry(AuditAction.USER_CHANGE).after["sign_in"] == "no password"


def test_signing_in_writes_no_user_entry(alice, client):
    client.force_login(alice)  # sets last_login, as every sign-in does
    alice.refresh_from_db()
    assert alice.last_login is not None and since_setup() == []


def test_a_save_that_changes_nothing_audited_writes_no_entry(alice):
    alice.save()
    assert since_setup() == []


def test_a_deleted_user_is_audited_with_their_groups(alice, ops):
    alice.groups.add(ops)
    alice.delete()
    entry = the_entry(AuditAction.USER_DELETE)
    assert (entry.before["username"], entry.before["groups"], entry.after) == ("alice", ["night shift"], None)


def test_a_user_made_by_createsuperuser_names_the_os_user_on_the_command_channel():
    with mock.patch.dict(os.environ, {"DJANGO_SUPERUSER_PASSWORD": PASSWORD}):
        call_command("createsuperuser", "--noinput", "--username", "root-ops", "--email", "r@example.com",
                     stdout=StringIO())
    entry = the_entry(AuditAction.USER_CREATE)
    assert (entry.actor, entry.channel, entry.after["is_superuser"]) == (os_user(), "command", True)


def test_a_user_entry_is_part_of_its_change_and_rolls_back_with_it(alice):
    with pytest.raises(RuntimeError), transaction.atomic():
        alice.is_staff = True
        alice.save()
        assert len(entries(AuditAction.USER_CHANGE)) == 1
        raise RuntimeError("the change fails after the save")
    assert entries(AuditAction.USER_CHANGE) == []


def test_a_user_constructed_with_an_existing_pk_and_saved_as_superuser_is_audited(alice):
    User(pk=alice.pk, username="alice", password=alice.password, is_superuser=True).save()
    entry = the_entry(AuditAction.USER_CHANGE)
    assert (entry.target_id, entry.before["is_superuser"], entry.after["is_superuser"]) == (
        str(alice.pk), False, True)


def test_a_user_constructed_with_a_new_pk_is_audited_as_created(db):
    User(pk=4242, username="bob", is_staff=True).save()
    entry = the_entry(AuditAction.USER_CREATE)
    assert (entry.target_id, entry.before, entry.after["is_staff"]) == ("4242", None, True)
    assert entries(AuditAction.USER_CHANGE) == []


def test_loaddata_making_an_existing_user_superuser_is_audited_on_the_command_channel(alice, tmp_path):
    fixture = tmp_path / "root.json"
    fixture.write_text(json.dumps([{"model": "auth.user", "pk": alice.pk, "fields": {
        "username": "alice", "password": alice.password, "is_superuser": True, "is_staff": True}}]))
    call_command("loaddata", str(fixture), stdout=StringIO())
    entry = the_entry(AuditAction.USER_CHANGE)
    assert (entry.before["is_superuser"], entry.after["is_superuser"]) == (False, True)
    assert (entry.before["is_staff"], entry.after["is_staff"], entry.after["sign_in"]) == (False, True, "password")
    assert (entry.actor, entry.channel) == (os_user(), "command")


# groups of a user


def test_adding_a_user_to_a_group_records_their_groups_before_and_after(alice, ops):
    alice.groups.add(ops)
    entry = the_entry(AuditAction.USER_GROUPS_CHANGE)
    assert (entry.target_id, entry.before, entry.after) == (str(alice.pk), {"groups": []}, {"groups": ["night shift"]})


def test_adding_users_from_the_groups_side_records_each_user(alice, ops):
    bob = User.objects.create_user(username="bob")
    ops.user_set.add(alice, bob)
    changed = {entry.target_label: entry.after for entry in entries(AuditAction.USER_GROUPS_CHANGE)}
    assert changed == {"alice": {"groups": ["night shift"]}, "bob": {"groups": ["night shift"]}}


def test_removing_and_clearing_a_users_groups_are_audited(alice, ops):
    day = Group.objects.create(name="day shift")
    alice.groups.add(ops, day)
    alice.groups.remove(ops)
    alice.groups.clear()
    assert [(entry.before, entry.after) for entry in entries(AuditAction.USER_GROUPS_CHANGE)] == [
        ({"groups": []}, {"groups": ["day shift", "night shift"]}),
        ({"groups": ["day shift", "night shift"]}, {"groups": ["day shift"]}),
        ({"groups": ["day shift"]}, {"groups": []})]


def test_adding_a_group_the_user_has_writes_no_entry(alice, ops):
    alice.groups.add(ops)
    alice.groups.add(ops)
    assert len(entries(AuditAction.USER_GROUPS_CHANGE)) == 1


# permissions


def test_a_users_direct_permissions_changed_are_audited(alice):
    alice.user_permissions.add(permission("reset_resource"))
    alice.user_permissions.set([permission("quarantine_resource")])
    assert [(entry.before, entry.after) for entry in entries(AuditAction.USER_PERMISSIONS_CHANGE)] == [
        ({"permissions": []}, {"permissions": ["resources.reset_resource"]}),
        ({"permissions": ["resources.reset_resource"]}, {"permissions": []}),
        ({"permissions": []}, {"permissions": ["resources.quarantine_resource"]})]


def test_a_groups_permissions_changed_are_audited(ops):
    ops.permissions.add(permission("reset_resource"), permission("view_resource"))
    entry = the_entry(AuditAction.GROUP_PERMISSIONS_CHANGE)
    assert (entry.target_type, entry.target_id, entry.target_label) == ("auth.group", str(ops.pk), "night shift")
    assert (entry.before, entry.after) == (
        {"permissions": []}, {"permissions": ["resources.reset_resource", "resources.view_resource"]})


def test_a_permission_given_to_groups_from_its_side_records_each_group(ops):
    permission("reset_resource").group_set.add(ops)
    assert the_entry(AuditAction.GROUP_PERMISSIONS_CHANGE).after == {"permissions": ["resources.reset_resource"]}


# groups


def test_a_group_created_renamed_and_deleted_is_audited_with_what_it_had(alice):
    group = Group.objects.create(name="night shift")
    group.name = "late shift"
    group.save()
    group.permissions.add(permission("reset_resource"))
    alice.groups.add(group)
    group.delete()
    assert the_entry(AuditAction.GROUP_CREATE).after == {"name": "night shift"}
    assert (the_entry(AuditAction.GROUP_CHANGE).before, the_entry(AuditAction.GROUP_CHANGE).after) == (
        {"name": "night shift"}, {"name": "late shift"})
    deleted = the_entry(AuditAction.GROUP_DELETE)
    assert (deleted.before, deleted.after) == (
        {"name": "late shift", "permissions": ["resources.reset_resource"], "members": ["alice"]}, None)


def test_a_group_constructed_with_an_existing_pk_and_renamed_is_audited(ops):
    Group(pk=ops.pk, name="late shift").save()
    entry = the_entry(AuditAction.GROUP_CHANGE)
    assert (entry.before, entry.after) == ({"name": "night shift"}, {"name": "late shift"})


# the admin


def test_changes_on_the_admins_user_page_are_audited_as_the_superuser_on_the_admin_channel(admin_client, alice, ops):
    page = reverse("admin:auth_user_change", args=[alice.pk])
    form = {"username": "alice", "first_name": "", "last_name": "", "email": "", "is_active": "on",
            "is_superuser": "on", "groups": [ops.pk], "user_permissions": [permission("reset_resource").pk],
            "date_joined_0": "2026-01-01", "date_joined_1": "00:00:00", "initial-date_joined_0": "2026-01-01",
            "initial-date_joined_1": "00:00:00", "_save": "Save"}
    response = admin_client.post(page, form)
    assert response.status_code == 302, response.content.decode()[:2000]
    changed = {entry.action: entry for entry in since_setup() if entry.target_label == "alice"}
    assert set(changed) == {AuditAction.USER_CHANGE, AuditAction.USER_GROUPS_CHANGE,
                            AuditAction.USER_PERMISSIONS_CHANGE}
    assert {(entry.actor, entry.channel) for entry in changed.values()} == {("admin", "admin")}
    assert changed[AuditAction.USER_CHANGE].after["is_superuser"] is True
    assert len({entry.request_id for entry in changed.values()}) == 1
