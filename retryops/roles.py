"""The console's roles: which auth groups exist and what each may do, as "app_label.codename".

Every app may import this module (it imports no model); the admin, the API and the tests map
people and clients to these groups. Superusers need no group. compensation's migration 0007
creates the groups with these permissions (sync_groups); changing a list here needs a new data
migration that calls sync_groups again, or databases migrated before keep the old groups.

A role grants entry: its member is made staff (make_role_members_staff), which the console's
sign-in asks for."""

from collections.abc import Iterable

VIEWERS = "viewers"
OPERATORS = "operators"
APPROVERS = "approvers"
POLICY_EDITORS = "policy editors"

# Every model of ours, read only: the lists and pages, the timelines (resource and task events,
# attempts, policy changes) shown inside them, the audit log, and the ops dashboard
# (scheduling.view_task; dead letters and work orders for its counts of them).
VIEW = [
    "audit.view_auditentry",
    "audit.view_streammessage",
    "audit.view_apiclient",  # the REST API's clients: names, key prefixes, last use (never a key)
    "audit.view_idempotencykey",  # no admin page: granted so that viewers view every model
    "resources.view_resourcepool",
    "resources.view_resource",
    "resources.view_resourceevent",
    "scheduling.view_retrypolicy",
    "scheduling.view_retrypolicychange",
    "scheduling.view_task",
    "scheduling.view_attempt",
    "scheduling.view_taskevent",
    "scheduling.view_batchconfig",
    # No admin page (the analytics' rollups): granted so that viewers view every model.
    "scheduling.view_failurerollup",
    "scheduling.view_retryrollup",
    "scheduling.view_attemptrollupmark",
    "compensation.view_workorder",
    "compensation.view_deadletter",
    "compensation.view_bulkreplay",
    "compensation.view_notification",
    "compensation.view_runbookrun",
    "telemetry.view_alert",  # the alerts' list and their history, read only for everyone
    "telemetry.view_alertevent",
    # No admin page (the metrics' rollups, the figures' snapshot): granted so that viewers view every model.
    "telemetry.view_metricrollup",
    "telemetry.view_metricgauge",
    "telemetry.view_metricwatermark",
    "telemetry.view_acceptancesnapshot",
]

OPERATE = [
    "resources.claim_resource",  # claim, release, heartbeat (the API's external workers)
    "resources.reset_resource",
    "resources.quarantine_resource",  # and release from quarantine
    "scheduling.retry_resource",  # "retry this resource", "run a flow with a specified resource"
    "scheduling.cancel_task",
    "scheduling.run_task_now",
    "compensation.replay_deadletter",
    "compensation.discard_deadletter",  # and mark resolved
    "compensation.add_workorder",  # open one by hand
    "compensation.change_workorder",  # its transitions, assignee, runbook, notes and resolution
    "compensation.run_runbook_action",  # request, run, withdraw
    "compensation.change_notification",  # send again
    "compensation.add_bulkreplay",  # start one
    "compensation.change_bulkreplay",  # cancel one
]

APPROVE = [
    "compensation.approve_runbookrun",  # approve or reject another operator's runbook action
]

EDIT_POLICIES = [
    "scheduling.add_retrypolicy",
    "scheduling.change_retrypolicy",
    "scheduling.add_batchconfig",
    "scheduling.change_batchconfig",
]

ROLES: dict[str, list[str]] = {
    VIEWERS: VIEW,
    OPERATORS: VIEW + OPERATE,
    APPROVERS: VIEW + APPROVE,
    POLICY_EDITORS: VIEW + EDIT_POLICIES,
}


def make_role_members_staff(sender, instance, action, reverse, pk_set, **kwargs) -> None:
    """m2m_changed of User.groups (connected by retryops.apps): whoever is given a role becomes
    staff, whatever gave it — the admin's user page, the shell, `api_client create --group` — so
    no member of a role is refused at the login page. Taking the last role away leaves staff status
    (a member may hold permissions of their own); untick Active to shut someone out. The change is
    saved, so audit.receivers records it."""
    if action != "post_add" or not pk_set:
        return
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group

    users = get_user_model()
    if reverse:  # group.user_set.add(...): pk_set are users
        given = pk_set if instance.name in ROLES else ()
    else:  # user.groups.add(...): pk_set are groups
        given = [instance.pk] if Group.objects.filter(pk__in=pk_set, name__in=ROLES).exists() else ()
    for user in users.objects.select_for_update().filter(pk__in=given, is_staff=False):
        user.is_staff = True
        user.save(update_fields=["is_staff"])
    if given and not reverse:
        instance.is_staff = True  # the caller's copy too, so that its next save keeps it


def _split(permission: str) -> tuple[str, str]:
    app_label, _, codename = permission.partition(".")
    return app_label, codename


def sync_groups(apps, *, using: str = "default", roles: dict[str, Iterable[str]] | None = None) -> list[str]:
    """Create or update the groups of `roles` (ROLES) so each has exactly its permissions, and
    return the permissions not found, which a later migration grants (their models are created
    after the caller's). `apps` is a migration's state or django.apps.apps.

    Permissions are created by post_migrate, after every migration of a `migrate` has run, so
    on a fresh database they do not exist yet here: this creates those of the installed apps
    first, as post_migrate would."""
    from django.contrib.auth.management import create_permissions

    for app_config in apps.get_app_configs():
        # A migration state's app configs have no models module, which create_permissions
        # takes as "an app without models".
        had = getattr(app_config, "models_module", None)
        app_config.models_module = had or True
        try:
            create_permissions(app_config, apps=apps, using=using, verbosity=0)
        finally:
            app_config.models_module = had
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    missing = []
    for name, wanted in (ROLES if roles is None else roles).items():
        found = []
        for permission in wanted:
            app_label, codename = _split(permission)
            row = (Permission.objects.using(using)
                   .filter(content_type__app_label=app_label, codename=codename).first())
            if row is None:
                missing.append(permission)
            else:
                found.append(row)
        group, _ = Group.objects.using(using).get_or_create(name=name)
        group.permissions.set(found)
    return missing


def remove_groups(apps, *, using: str = "default", roles: dict[str, Iterable[str]] | None = None) -> None:
    """Delete the groups of `roles` (ROLES): the reverse of sync_groups. Their members stay."""
    Group = apps.get_model("auth", "Group")
    Group.objects.using(using).filter(name__in=list(ROLES if roles is None else roles)).delete()
