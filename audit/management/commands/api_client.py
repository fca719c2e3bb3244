"""manage.py api_client create|revoke|list: the REST API's clients from the command line."""

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management.base import CommandError
from django.db import transaction

from audit import selectors, services
from audit.management.base import AuditedCommand
from retryops.errors import DomainError


class Command(AuditedCommand):
    help = ("Create an API client and print its key (once: only its hash is kept), revoke one, or list them. "
            "A client acts as its service user: what that user's groups and permissions allow, the client may do.")

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="verb", required=True)
        create = sub.add_parser("create", help="Create a client; prints its key once.")
        create.add_argument("name", help="The external system's name (letters, digits, - and _); audit: api:<name>.")
        create.add_argument("--user", required=True, help="The service user it acts as.")
        create.add_argument("--create-user", action="store_true",
                            help="Create the user (no password: it cannot log in) if it does not exist.")
        create.add_argument("--group", action="append", default=[],
                            help="Add the user to this group (repeatable), e.g. viewers or operators.")
        revoke = sub.add_parser("revoke", help="Revoke a client's key at once.")
        revoke.add_argument("name", help="The active client's name, or its id.")
        revoke.add_argument("--reason", default="", help="Why, for the audit log.")
        listing = sub.add_parser("list", help="List clients: name, key prefix, user, last use.")
        listing.add_argument("--all", action="store_true", help="Revoked clients too.")

    def handle(self, *args, verb, **options):
        try:
            getattr(self, f"_{verb}")(**options)
        except DomainError as exc:
            raise CommandError(str(exc)) from None

    def _create(self, *, name, user, create_user, group, **options):
        users = get_user_model()
        groups = []
        for group_name in group:
            found = Group.objects.filter(name=group_name).first()
            if found is None:
                raise CommandError(f"no group {group_name!r}; the groups are: "
                                   f"{', '.join(Group.objects.order_by('name').values_list('name', flat=True)) or 'none'}")
            groups.append(found)
        with transaction.atomic():
            service_user = users.objects.filter(**{users.USERNAME_FIELD: user}).first()
            if service_user is None:
                if not create_user:
                    raise CommandError(f"no user {user!r}: create it, or pass --create-user")
                service_user = users.objects.create_user(**{users.USERNAME_FIELD: user})  # unusable password
            service_user.groups.add(*groups)
            client, key = services.create_api_client(name=name, user=service_user)
        self.stdout.write(self.style.SUCCESS(f"created API client {client.name} acting as {service_user}"))
        self.stdout.write("its key, shown this once (only its hash is kept):")
        self.stdout.write(key)

    def _revoke(self, *, name, reason, **options):
        client = services.revoke_api_client(client=int(name) if name.isdigit() else name, reason=reason)
        self.stdout.write(self.style.SUCCESS(f"revoked API client {client.name} ({client.key_prefix}…)"))

    def _list(self, *, all, **options):
        clients = selectors.api_clients(include_revoked=all)
        for client in clients:
            state = f"revoked {client.revoked_at:%Y-%m-%d %H:%M}" if client.revoked_at else "active"
            used = f"{client.last_used_at:%Y-%m-%d %H:%M}" if client.last_used_at else "never"
            self.stdout.write(f"{client.pk}\t{client.name}\t{client.key_prefix}…\t{client.user}\t{state}\tlast used "
                              f"{used}")
        if not clients:
            self.stdout.write("no API clients")
