"""The REST API's clients: created with a key shown once, revoked, listed; by the admin and by
`manage.py api_client`; each creation and revocation audited."""

from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.urls import reverse

from audit.models import ApiClient, AuditEntry
from retryops.errors import BadInput, IllegalTransition
from audit.selectors import api_client_for_key
from audit.services import create_api_client, hash_key, revoke_api_client

pytestmark = pytest.mark.django_db


@pytest.fixture
def svc(django_user_model):
    return django_user_model.objects.create_user(username="svc-billing")


# Services


def test_a_new_client_gets_a_key_of_32_random_bytes_of_which_only_the_hash_is_kept(svc):
    client, key = create_api_client(name="billing", user=svc, actor="carol")
    assert key.startswith(client.key_prefix + "_") and len(key) - len(client.key_prefix) - 1 >= 43
    assert client.key_hash == hash_key(key) and key not in client.key_hash
    assert api_client_for_key(key).client == client


def test_a_key_brings_its_users_permissions_as_django_reads_them_from_the_user_and_its_groups(svc):
    from django.contrib.auth.backends import ModelBackend
    from django.contrib.auth.models import Group, Permission

    readers = Group.objects.create(name="readers")
    readers.permissions.add(*Permission.objects.filter(codename__in=["view_resource", "view_attempt"]))
    svc.groups.add(readers, Group.objects.create(name="empty"))
    svc.user_permissions.add(*Permission.objects.filter(codename__in=["view_resource", "reset_resource"]))
    client = api_client_for_key(create_api_client(name="billing", user=svc)[1]).client
    assert client.user._perm_cache == ModelBackend().get_all_permissions(type(svc).objects.get(pk=svc.pk)) == {
        "resources.view_resource", "resources.reset_resource", "scheduling.view_attempt"}


def test_creating_a_client_is_audited_with_its_prefix_not_its_key(svc):
    client, key = create_api_client(name="billing", user=svc, actor="carol")
    entry = AuditEntry.objects.get(action="api_client.create")
    assert (entry.actor, entry.after["key_prefix"], entry.target_id) == ("carol", client.key_prefix, str(client.pk))
    assert key not in str(entry.after)


def test_two_active_clients_cannot_share_a_name(svc):
    create_api_client(name="billing", user=svc)
    with pytest.raises(BadInput) as refused:
        create_api_client(name="billing", user=svc)
    assert refused.value.field == "name"


@pytest.mark.parametrize("name", ["", "two words", "x" * 101, None])
def test_a_name_that_is_not_a_slug_is_refused(svc, name):
    with pytest.raises(BadInput):
        create_api_client(name=name, user=svc)


def test_a_revoked_key_finds_no_client_and_says_why(svc):
    client, key = create_api_client(name="billing", user=svc)
    revoke_api_client(client=client, actor="carol", reason="leaked in a log")
    check = api_client_for_key(key)
    assert check.client is None and "revoked" in check.problem
    assert AuditEntry.objects.get(action="api_client.revoke").reason == "leaked in a log"


def test_a_client_is_revoked_once(svc):
    client, _ = create_api_client(name="billing", user=svc)
    revoke_api_client(client=client)
    with pytest.raises(IllegalTransition) as refused:
        revoke_api_client(client=client.pk)
    assert refused.value.code == "illegal_transition"


@pytest.mark.parametrize("key", ["", "rok_", "Bearer x", "rok_00000000_" + "A" * 43, "é" * 56, "\ud800" * 56])
def test_something_that_is_no_key_of_ours_finds_no_client(svc, key):
    create_api_client(name="billing", user=svc)
    assert api_client_for_key(key).client is None


# The command


def run(*args) -> str:
    out = StringIO()
    call_command("api_client", *args, stdout=out)
    return out.getvalue()


def test_the_command_creates_a_client_and_its_service_user_and_prints_the_key_once(django_user_model):
    out = run("create", "billing", "--user", "svc-billing", "--create-user", "--group", "operators")
    key = out.strip().splitlines()[-1]
    client = api_client_for_key(key).client
    assert (client.name, client.user.username) == ("billing", "svc-billing")
    assert list(client.user.groups.values_list("name", flat=True)) == ["operators"]
    assert not client.user.has_usable_password()


def test_the_command_refuses_an_unknown_user_or_group(svc):
    with pytest.raises(CommandError, match="--create-user"):
        run("create", "billing", "--user", "nobody")
    with pytest.raises(CommandError, match="no group"):
        run("create", "billing", "--user", "svc-billing", "--group", "wizards")
    assert not ApiClient.objects.exists()


def test_the_command_revokes_by_name_and_lists_with_prefixes_never_keys(svc):
    _, key = create_api_client(name="billing", user=svc)
    create_api_client(name="shipping", user=svc)
    run("revoke", "billing", "--reason", "rotated")
    listing = run("list")
    assert "\tshipping\t" in listing and "\tbilling\t" not in listing and key not in listing
    assert "\tbilling\t" in run("list", "--all")
    assert AuditEntry.objects.get(action="api_client.revoke").channel == "command"


def test_revoking_an_unknown_client_is_a_command_error(svc):
    with pytest.raises(CommandError, match="no active API client"):
        run("revoke", "nobody")


# The admin


def test_the_admin_shows_a_new_clients_key_once_and_stores_it_nowhere(admin_client, svc):
    response = admin_client.post(reverse("admin:audit_apiclient_add"), {"name": "billing", "user": svc.pk})
    assert response.status_code == 200 and "no-store" in response["Cache-Control"]
    key = response.context["key"]
    assert api_client_for_key(key).client.name == "billing"
    page = admin_client.get(reverse("admin:audit_apiclient_change", args=[api_client_for_key(key).client.pk]))
    assert key not in page.content.decode()


def test_the_admin_refuses_a_name_an_active_client_has(admin_client, svc):
    create_api_client(name="billing", user=svc)
    response = admin_client.post(reverse("admin:audit_apiclient_add"), {"name": "billing", "user": svc.pk})
    assert "revoke it first" in str(response.context["adminform"].form.errors["name"])
    assert ApiClient.objects.count() == 1


def test_the_admins_revoke_action_revokes_the_selected_clients(admin_client, svc):
    client, key = create_api_client(name="billing", user=svc)
    admin_client.post(reverse("admin:audit_apiclient_changelist"),
                      {"action": "revoke_selected", "_selected_action": [client.pk]})
    assert api_client_for_key(key).client is None
    assert AuditEntry.objects.get(action="api_client.revoke").actor == "admin"


def test_a_key_whose_service_user_was_deleted_finds_no_client(svc):
    client, key = create_api_client(name="billing", user=svc)
    svc.delete()
    assert api_client_for_key(key).client is None
    assert ApiClient.objects.get(pk=client.pk).user is None
