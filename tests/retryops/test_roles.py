"""The console's groups: compensation's migration 0007 makes them from retryops.roles, with
exactly their permissions, also on a database where no permission exists yet; unapplied, it
removes them."""

import re
from io import StringIO
from pathlib import Path
from unittest import mock

import pytest
from django.apps import apps
from django.contrib.auth.models import Group, Permission, User
from django.contrib.contenttypes.models import ContentType
from django.core.management import call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.test import Client
from django.urls import reverse

from audit.choices import AuditAction
from audit.models import AuditEntry
from retryops import roles
from tests.retryops.conftest import member

pytestmark = pytest.mark.django_db

OUR_APPS = ["audit", "resources", "scheduling", "compensation", "telemetry"]
BEFORE, GROUPS = ("compensation", "0006_console_permissions"), ("compensation", "0007_console_groups")
# Apps whose models come after GROUPS (their tables depend on it): a migration of their own grants them.
LATER_APPS = ("telemetry",)


def granted() -> dict[str, set[str]]:
    return {group.name: {f"{p.content_type.app_label}.{p.codename}" for p in group.permissions.all()}
            for group in Group.objects.filter(name__in=roles.ROLES).prefetch_related("permissions__content_type")}


def wanted(*, leaving_out: tuple[str, ...] = ()) -> dict[str, set[str]]:
    """Each group's permissions, but those of the apps `leaving_out`."""
    return {name: {p for p in permissions if p.split(".")[0] not in leaving_out}
            for name, permissions in roles.ROLES.items()}


def migrate(target=None) -> None:
    """Migrate to `target`, or to the latest migration of every app."""
    # Migrations run in this test's transaction, which the test's end rolls back.
    executor = MigrationExecutor(connection)
    executor.migrate([target] if target else executor.loader.graph.leaf_nodes())


@pytest.fixture
def no_permissions_yet():
    """The database as `migrate` leaves it before post_migrate: no permission and no content type
    of our apps, and no group."""
    Group.objects.filter(name__in=roles.ROLES).delete()
    ContentType.objects.filter(app_label__in=OUR_APPS).delete()  # their permissions go with them
    ContentType.objects.clear_cache()
    yield
    ContentType.objects.clear_cache()  # the ids the migration made are rolled back with the test


def test_the_groups_are_the_ones_the_console_documents():
    assert list(roles.ROLES) == ["viewers", "operators", "approvers", "policy editors"]


def test_each_permission_a_role_names_exists():
    existing = {f"{app_label}.{codename}" for app_label, codename
                in Permission.objects.values_list("content_type__app_label", "codename")}
    assert {p for permissions in roles.ROLES.values() for p in permissions} - existing == set()


def test_viewers_may_view_every_model_of_ours():
    ours = {f"{model._meta.app_label}.view_{model._meta.model_name}" for label in OUR_APPS
            for model in apps.get_app_config(label).get_models()}
    assert set(roles.ROLES["viewers"]) == ours


def test_every_other_group_may_do_what_viewers_may():
    for name, permissions in roles.ROLES.items():
        assert set(roles.VIEW) <= set(permissions), name


def test_the_migration_makes_each_group_with_exactly_its_permissions_where_none_exists_yet(no_permissions_yet):
    migrate(BEFORE)
    assert not Permission.objects.filter(content_type__app_label__in=OUR_APPS).exists()

    migrate(GROUPS)
    assert granted() == wanted(leaving_out=LATER_APPS)

    migrate()
    assert granted() == wanted()


def test_the_migration_sets_a_group_of_the_same_name_to_exactly_its_permissions(console_groups):
    migrate(BEFORE)
    Group.objects.create(name="viewers").permissions.add(Permission.objects.get(codename="reset_resource"))

    migrate(GROUPS)

    assert granted() == wanted()


def test_a_permission_not_created_yet_is_left_to_a_later_migration_and_named(console_groups):
    missing = roles.sync_groups(apps, roles={"viewers": ["resources.view_resource", "resources.view_nothing_yet"]})

    assert missing == ["resources.view_nothing_yet"]
    assert granted()["viewers"] == {"resources.view_resource"}


def test_unapplying_the_migration_removes_the_groups_and_keeps_their_members(console_groups):
    vera = member("vera", "viewers")
    other = Group.objects.create(name="auditors")

    migrate(BEFORE)

    assert not Group.objects.filter(name__in=roles.ROLES).exists()
    assert Group.objects.filter(pk=other.pk).exists()
    vera.refresh_from_db()
    assert vera.is_staff and not vera.groups.exists()


def test_a_member_of_a_group_has_its_permissions_and_no_other(console_groups):
    olga = member("olga", "operators")
    assert olga.has_perms(roles.ROLES["operators"])
    assert not olga.has_perm("compensation.approve_runbookrun")
    assert not olga.has_perm("scheduling.change_retrypolicy")


# A role grants entry: the console's sign-in needs staff status, which a role gives its member,
# whatever gives the role (the admin's user page, the shell, a command).

CONSOLE_DOCS = Path(__file__).resolve().parents[2] / "docs" / "console.md"
PASSWORD = "Newcomer-pw-7731"
NEW_USER = {"username": "alice", "email": "", "first_name": "", "last_name": "", "is_active": True, "is_staff": False,
            "is_superuser": False}


def signs_in(username: str, password: str = PASSWORD) -> bool:
    """Through the console's login page, as the person would."""
    response = Client().post(reverse("admin:login"), {"username": username, "password": password,
                                                      "next": reverse("admin:index")})
    return response.status_code == 302 and response.url == reverse("admin:index")


def staff(user: User) -> bool:
    user.refresh_from_db()
    return user.is_staff


def test_a_user_given_a_role_in_the_shell_becomes_staff_and_signs_in(console_groups):
    alice = User.objects.create_user("alice", password=PASSWORD)
    alice.groups.add(console_groups["approvers"])
    assert staff(alice) and alice.is_staff
    assert signs_in("alice")
    entry = AuditEntry.objects.filter(action=AuditAction.USER_CHANGE, target_id=str(alice.pk)).get()
    assert (entry.before["is_staff"], entry.after["is_staff"]) == (False, True)


def test_users_added_from_a_roles_side_become_staff(console_groups):
    alice, bob = User.objects.create_user("alice"), User.objects.create_user("bob")
    console_groups["operators"].user_set.add(alice, bob)
    assert staff(alice) and staff(bob)


def test_a_group_that_is_no_role_makes_nobody_staff(console_groups):
    alice = User.objects.create_user("alice")
    alice.groups.add(Group.objects.create(name="book club"))
    assert not staff(alice)


def test_taking_the_last_role_away_leaves_staff_status(console_groups):
    alice = User.objects.create_user("alice")
    alice.groups.add(console_groups["viewers"])
    alice.groups.clear()
    assert staff(alice)


def test_a_role_ticked_on_the_admins_user_page_makes_the_user_staff_and_lets_them_in(admin_client, console_groups):
    admin_client.post(reverse("admin:auth_user_add"), {
        "username": "erin", "usable_password": "true", "password1": PASSWORD, "password2": PASSWORD})
    erin = User.objects.get(username="erin")
    assert not signs_in("erin")  # no role yet: the console has nothing for her
    response = admin_client.post(reverse("admin:auth_user_change", args=[erin.pk]), {
        "username": "erin", "is_active": "on", "groups": [console_groups["approvers"].pk],
        "date_joined_0": "2026-01-01", "date_joined_1": "00:00:00"})
    assert response.status_code == 302, response.content.decode()[:2000]
    assert staff(erin) and signs_in("erin")


def test_the_console_docs_steps_to_give_someone_a_role_let_them_sign_in(console_groups):
    """docs/console.md's shell command, run as it is written, then `manage.py changepassword` as it says."""
    text = CONSOLE_DOCS.read_text()
    steps = text[text.index("Give someone a role"):]
    command = re.search(r'`manage\.py shell -c "(.+?)"`', steps).group(1)
    assert "changepassword alice" in steps[:steps.index("\n\n")]
    call_command("shell", command=command, stdout=StringIO())
    with mock.patch("django.contrib.auth.management.commands.changepassword.getpass.getpass",
                    return_value=PASSWORD):
        call_command("changepassword", "alice", stdout=StringIO())
    alice = User.objects.get(username="alice")
    assert list(alice.groups.values_list("name", flat=True)) == ["operators"]
    assert signs_in("alice")
    assert [(entry.action, entry.after) for entry in AuditEntry.objects.filter(target_id=str(alice.pk))
            .order_by("id")] == [
        ("user.create", {**NEW_USER, "sign_in": "no password"}),
        ("user.change", {**NEW_USER, "is_staff": True, "sign_in": "no password"}),
        ("user.change_groups", {"groups": ["operators"]}),
        ("user.change", {**NEW_USER, "is_staff": True, "sign_in": "new password"})]
