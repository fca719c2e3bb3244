"""Reading the audit log: a target's history, a request's entries, the target types and recent actors."""

from django.db import connection, models
from django.db.models import QuerySet

from audit.models import AuditEntry
from audit.services import Target, target_of


def history_of(target: models.Model | Target) -> QuerySet[AuditEntry]:
    """A target's entries, newest first (audit_target_history_idx)."""
    what = target_of(target)
    return AuditEntry.objects.filter(target_type=what.type, target_id=str(what.id)).order_by("-id")


def entries_of_request(request_id: str) -> QuerySet[AuditEntry]:
    """Everything one web request, command run or job run recorded, in order (audit_request_idx)."""
    return AuditEntry.objects.filter(request_id=request_id).order_by("id")


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
