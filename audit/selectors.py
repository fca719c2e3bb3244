"""Reading the audit log: the target types and recent actors; and the API client a key belongs to."""

import functools
import hmac
import time
from dataclasses import dataclass

from django.contrib.auth.models import Group, Permission
from django.contrib.contenttypes.models import ContentType
from django.db import connection
from django.db.models import QuerySet
from django.db.models.expressions import RawSQL

from audit import keycache
from audit.models import ApiClient, AuditEntry
from audit.services import KEY_LENGTH, KEY_TAG, PREFIX_LENGTH, hash_key


def target_types() -> list[str]:
    """The distinct target types, read as a skip scan of audit_target_history_idx: one index probe
    per type, instead of the DISTINCT over every row that a plain list_filter would run."""
    table = AuditEntry._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(f"""
            WITH RECURSIVE types(t) AS (
                (SELECT target_type FROM {table} ORDER BY target_type LIMIT 1)
                UNION ALL
                SELECT (SELECT target_type FROM {table} WHERE target_type > types.t ORDER BY target_type LIMIT 1)
                FROM types WHERE types.t IS NOT NULL
            )
            SELECT t FROM types WHERE t IS NOT NULL
        """)
        return [row[0] for row in cursor.fetchall()]


# How far back recent_actors looks: a bounded read, whatever the size of the table.
RECENT_ENTRIES = 10_000


def recent_actors() -> list[str]:
    """Who wrote the latest RECENT_ENTRIES entries, in alphabetical order: the newest ids read
    backwards on the primary key, instead of a DISTINCT over every row."""
    table = AuditEntry._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT DISTINCT actor FROM (SELECT actor FROM {table} ORDER BY id DESC LIMIT %s) recent "
                       "ORDER BY actor", [RECENT_ENTRIES])
        return [row[0] for row in cursor.fetchall()]


@dataclass(frozen=True)
class KeyCheck:
    """What a presented API key turned out to be: the active client it belongs to, or why none."""

    client: ApiClient | None
    problem: str = ""


@functools.cache
def _permissions_sql() -> str:
    """The API client's service user's permissions, "app_label.codename", from the user and from
    its groups, as an array column of the client's row. Written out once: built with the ORM (an
    ArraySubquery over Permission, OuterRef the user) it cost 2 ms of compiling on every request
    of the API, more than the query itself."""
    user = ApiClient._meta.get_field("user").related_model
    user_permissions = user.user_permissions.through._meta.db_table
    user_groups = user.groups.through._meta.db_table
    group_permissions = Group.permissions.through._meta.db_table
    return f"""ARRAY(
        SELECT content_type.app_label || '.' || permission.codename
        FROM {Permission._meta.db_table} permission
        JOIN {ContentType._meta.db_table} content_type ON content_type.id = permission.content_type_id
        WHERE permission.id IN (
            SELECT permission_id FROM {user_permissions} WHERE user_id = {ApiClient._meta.db_table}.user_id
            UNION ALL
            SELECT granted.permission_id FROM {group_permissions} granted
            JOIN {user_groups} member ON member.group_id = granted.group_id
            WHERE member.user_id = {ApiClient._meta.db_table}.user_id))"""


def api_client_for_key(key: str) -> KeyCheck:
    """The active client whose key `key` is, with its service user: the row is found by the key's
    prefix (not a secret) and the key is then compared by its hash in constant time, so neither a
    database index nor a string comparison tells an attacker how much of a guess was right."""
    if not isinstance(key, str) or not key.startswith(KEY_TAG) or len(key) != KEY_LENGTH:
        return KeyCheck(None, "not an API key of this service")
    # The service user's permissions ride along ("app_label.codename", from the user and its
    # groups): ModelBackend would read them in two more queries on every request.
    client = ApiClient.objects.select_related("user").annotate(permissions=RawSQL(_permissions_sql(), ())).filter(
        key_prefix=key[:PREFIX_LENGTH]).first()
    if client is None or not hmac.compare_digest(client.key_hash, hash_key(key)):
        return KeyCheck(None, "unknown API key")
    if client.revoked_at is not None:
        return KeyCheck(None, f"API key {client.key_prefix}… of {client.name} was revoked at "
                              f"{client.revoked_at.isoformat()}")
    if client.user is None or not client.user.is_active:
        return KeyCheck(None, f"the service user of API client {client.name} is inactive or deleted")
    # Where django.contrib.auth's ModelBackend keeps a user's permissions once it has read them.
    client.user._perm_cache = set(client.permissions)
    return KeyCheck(client)


def cached_api_client_for_key(key: str) -> KeyCheck:
    """api_client_for_key, answered from this process's cache when it read the same key's client
    less than keycache.KEY_CACHE_SECONDS ago (the REST API's authentication: a query per request
    was most of an API call's fixed cost). Only active clients are kept; a refusal is read anew.
    The client and its user are shared by the requests the entry answers: nothing changes them
    but note_api_client_use's last_used_at."""
    if not isinstance(key, str):
        return api_client_for_key(key)
    key_hash = hash_key(key)
    cached = keycache.get(key_hash)
    if cached is not None:
        return cached
    read_at = time.monotonic()
    check = api_client_for_key(key)
    if check.client is not None:
        keycache.put(key_hash, check, read_at)
    return check


def api_clients(*, include_revoked: bool = False) -> QuerySet[ApiClient]:
    """The API clients with their service users, by name; only active ones unless told otherwise."""
    clients = ApiClient.objects.select_related("user").order_by("name", "-id")
    return clients if include_revoked else clients.filter(revoked_at__isnull=True)
