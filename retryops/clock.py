"""One clock for leases, due times and sweeps: PostgreSQL's. Hosts' clocks differ (a worker 20 s
behind, a dispatcher 15 s ahead); the database's is the one every process shares."""

from datetime import datetime

from django.db import connection


def db_now() -> datetime:
    """PostgreSQL's clock at this statement (statement_timestamp(), what Django's Now() reads;
    now() would be the start of the transaction)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement_timestamp()")
        return cursor.fetchone()[0]
