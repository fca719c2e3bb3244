"""Audit entries for changes to who may do what: users, groups (the console's roles) and
permissions. Django's auth models have no service of ours that every path goes through — the
admin's user and group pages, createsuperuser and changepassword, loaddata, api_client, the shell
all write them directly — so these receivers record what changed, whichever path changed it through
the models (a QuerySet.update() or raw SQL sends no signal, and is not seen).

Each entry is written in the transaction of its change: Django runs m2m changes and deletes in one,
and so does the admin. A bare save() in autocommit (the shell, createsuperuser) has committed
before post_save is sent; its entry follows at once in a transaction of its own.

The actor is the audit context's; where nobody set one (the shell, Django's own commands), the OS
user on the command channel, as AuditedCommand names a command's. A password never reaches an
entry: only that it changed ("sign_in": "new password")."""

from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import connection, transaction
from django.db.models.signals import m2m_changed, post_delete, post_save, pre_delete, pre_save

from audit import context, keycache
from audit.choices import AuditAction, Channel
from audit.management.base import os_user
from audit.services import record_audit

USER_FIELDS = ("username", "email", "first_name", "last_name", "is_active", "is_staff", "is_superuser")
# Written by every sign-in (update_last_login): not a change of who may do what.
QUIET_FIELDS = frozenset({"last_login"})
PERMISSION_LABEL = ("permission__content_type__app_label", "permission__codename")


def _record(**entry) -> None:
    if not context.is_set():
        entry.update(actor=os_user(), channel=Channel.COMMAND)
    if connection.in_atomic_block:
        record_audit(**entry)
    else:
        with transaction.atomic():
            record_audit(**entry)


def _locked(queryset):
    # Outside a transaction there is nothing to hold a lock in (and select_for_update refuses).
    return queryset.select_for_update() if connection.in_atomic_block else queryset


# Users


def user_snapshot(user) -> dict:
    """What an entry shows of a user: who they are and what the console lets them do; of their
    password only whether they have one."""
    return {**{name: getattr(user, name) for name in USER_FIELDS},
            # An empty hash (User.objects.create without create_user) matches no password either.
            "sign_in": "password" if user.password and user.has_usable_password() else "no password"}


def _before_user_save(sender, instance, update_fields=None, **kwargs):
    instance.__dict__.pop("_audit_before", None)
    # Whenever the pk is set, not only for an instance read from the database: one constructed with
    # a stored pk (User(pk=7, is_superuser=True).save()) or loaded by loaddata (raw) is `adding`,
    # and its save still updates that row. No row: post_save says created.
    if instance.pk is None or (update_fields is not None and set(update_fields) <= QUIET_FIELDS):
        return
    old = _locked(sender.objects.filter(pk=instance.pk)).first()
    if old is not None:
        instance.__dict__["_audit_before"] = (user_snapshot(old), old.password)


def _after_user_save(sender, instance, created, update_fields=None, **kwargs):
    before = instance.__dict__.pop("_audit_before", None)
    if created:
        _record(action=AuditAction.USER_CREATE, target=instance, before=None, after=user_snapshot(instance))
        return
    if before is None:
        return
    snapshot, old_hash = before
    after = user_snapshot(instance)
    # A sign-in that upgrades the stored hash saves only the password, with no new one set.
    rehashed = update_fields is not None and set(update_fields) == {"password"} and instance._password is None
    if instance.password != old_hash and not rehashed and after["sign_in"] == "password":
        after["sign_in"] = "new password"
    if after != snapshot:
        _record(action=AuditAction.USER_CHANGE, target=instance, before=snapshot, after=after)


def _before_user_delete(sender, instance, **kwargs):
    groups = sorted(instance.groups.values_list("name", flat=True))
    instance.__dict__["_audit_before"] = {**user_snapshot(instance), "groups": groups}


# Groups


def _before_group_save(sender, instance, **kwargs):
    instance.__dict__.pop("_audit_before", None)
    if instance.pk is not None:  # as for users: a constructed or loaded group with a stored pk too
        instance.__dict__["_audit_before"] = _locked(Group.objects.filter(pk=instance.pk)).values("name").first()


def _after_group_save(sender, instance, created, **kwargs):
    before, after = instance.__dict__.pop("_audit_before", None), {"name": instance.name}
    if created:
        _record(action=AuditAction.GROUP_CREATE, target=instance, before=None, after=after)
    elif before is not None and before != after:
        _record(action=AuditAction.GROUP_CHANGE, target=instance, before=before, after=after)


def _before_group_delete(sender, instance, **kwargs):
    # Deleting a group takes its memberships and permissions with it, sending no m2m_changed.
    permissions = M2M_OF[Group.permissions.through].names(Group.permissions.through, [instance.pk])[instance.pk]
    members = sorted(instance.user_set.values_list(get_user_model().USERNAME_FIELD, flat=True))
    instance.__dict__["_audit_before"] = {"name": instance.name, "permissions": permissions, "members": members}


def _after_delete(sender, instance, **kwargs):
    """A user's or a group's deletion, with what _before_user_delete or _before_group_delete kept."""
    action = AuditAction.GROUP_DELETE if sender is Group else AuditAction.USER_DELETE
    _record(action=action, target=instance, before=instance.__dict__.pop("_audit_before", None), after=None)


# Memberships and permissions: one entry per user or group whose list changed, with the list
# before and after (a form's set() removes, then adds: two entries).


@dataclass(frozen=True)
class M2M:
    owner: type  # whose list it is: a user's groups, a user's or a group's permissions
    owner_fk: str  # the through table's column of the owner, and of what is listed
    listed_fk: str
    label: tuple[str, ...]  # what names a listed row, joined with "."
    key: str
    action: str

    def names(self, through, owner_ids) -> dict[int, list[str]]:
        found: dict[int, list[str]] = {pk: [] for pk in owner_ids}
        rows = through.objects.filter(**{f"{self.owner_fk}_id__in": owner_ids}).values_list(
            f"{self.owner_fk}_id", *self.label)
        for owner_id, *parts in rows:
            found[owner_id].append(".".join(parts))
        return {pk: sorted(names) for pk, names in found.items()}

    def owners(self, through, instance, reverse: bool, pk_set) -> list[int]:
        if not reverse:
            return [instance.pk]
        if pk_set is not None:
            return sorted(pk_set)
        # clear() from the listed side (group.user_set.clear()): everyone who had it
        return sorted(through.objects.filter(**{f"{self.listed_fk}_id": instance.pk}).values_list(
            f"{self.owner_fk}_id", flat=True))


User = get_user_model()
M2M_OF = {
    User.groups.through: M2M(User, "user", "group", ("group__name",), "groups", AuditAction.USER_GROUPS_CHANGE),
    User.user_permissions.through: M2M(User, "user", "permission", PERMISSION_LABEL, "permissions",
                                       AuditAction.USER_PERMISSIONS_CHANGE),
    Group.permissions.through: M2M(Group, "group", "permission", PERMISSION_LABEL, "permissions",
                                   AuditAction.GROUP_PERMISSIONS_CHANGE),
}


def _m2m_changed(sender, instance, action, reverse, pk_set, **kwargs):
    m2m = M2M_OF[sender]
    stash = instance.__dict__.setdefault("_audit_m2m", {})
    if action.startswith("pre_"):
        owner_ids = m2m.owners(sender, instance, reverse, pk_set)
        stash[sender] = (owner_ids, m2m.names(sender, owner_ids))
        return
    owner_ids, before = stash.pop(sender, ([], {}))
    after = m2m.names(sender, owner_ids)
    changed = [pk for pk in owner_ids if before[pk] != after[pk]]
    owners = {instance.pk: instance} if not reverse else m2m.owner.objects.in_bulk(changed)
    for pk in changed:
        _record(action=m2m.action, target=owners[pk], before={m2m.key: before[pk]}, after={m2m.key: after[pk]})


def connect() -> None:
    """Called once, by AuditConfig.ready."""
    for signal, receiver, model in [
            (pre_save, _before_user_save, User), (post_save, _after_user_save, User),
            (pre_delete, _before_user_delete, User), (post_delete, _after_delete, User),
            (pre_save, _before_group_save, Group), (post_save, _after_group_save, Group),
            (pre_delete, _before_group_delete, Group), (post_delete, _after_delete, Group)]:
        signal.connect(receiver, sender=model, dispatch_uid=f"audit.{receiver.__name__}")
    for through in M2M_OF:
        m2m_changed.connect(_m2m_changed, sender=through, dispatch_uid=f"audit.m2m_changed.{through._meta.label}")
    # The API's cache of authenticated clients carries their users' permissions and whether they
    # are active: a change to who may do what empties this process's at once (audit.keycache).
    for signal, model in [(post_save, User), (post_delete, User), (post_save, Group), (post_delete, Group)]:
        signal.connect(keycache.forget, sender=model, dispatch_uid=f"audit.keycache.{signal is post_save}.{model.__name__}")
    for through in M2M_OF:
        m2m_changed.connect(keycache.forget, sender=through, dispatch_uid=f"audit.keycache.{through._meta.label}")
