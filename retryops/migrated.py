"""Whether the database has every migration this code needs: a worker, the ops process or a web process
started against an empty or older database would otherwise fail later, on a missing table or
column in the middle of an attempt. Cheap enough for every readiness probe: the migrations on
disk are read once per process, then one query of django_migrations."""

import functools
import sys

from django.core.management.base import CommandError
from django.db import DEFAULT_DB_ALIAS, OperationalError, connections
from django.db.migrations.loader import MigrationLoader
from django.db.migrations.recorder import MigrationRecorder
from django.utils.translation import gettext

# Past this many, the message names the first ones and counts the rest.
NAMED = 5


@functools.cache
def _needed() -> tuple[tuple[tuple[str, str], ...], dict[tuple[str, str], frozenset]]:
    """Every migration on disk, in an order that applies them, and what each squashed one replaces."""
    graph = MigrationLoader(None, ignore_no_migrations=True).graph
    ordered = []
    for leaf in graph.leaf_nodes():
        ordered += [key for key in graph.forwards_plan(leaf) if key not in ordered]
    replaces = {key: frozenset(graph.nodes[key].replaces) for key in ordered if graph.nodes[key].replaces}
    return tuple(ordered), replaces


def missing_migrations(using: str = DEFAULT_DB_ALIAS) -> list[str]:
    """The migrations this code has and the database has not applied, as app.name, in order."""
    recorder = MigrationRecorder(connections[using])
    applied = set(recorder.applied_migrations()) if recorder.has_table() else set()
    ordered, replaces = _needed()
    # A squashed migration counts as applied when everything it replaces is (as migrate sees it).
    return [f"{app}.{name}" for app, name in ordered
            if (app, name) not in applied and not (replaces.get((app, name), {None}) <= applied)]


def describe(missing: list[str]) -> str:
    """One line saying what to do, naming the missing migrations."""
    named = ", ".join(missing[:NAMED])
    if len(missing) > NAMED:
        named = gettext("%(named)s and %(more)d more") % {"named": named, "more": len(missing) - NAMED}
    return gettext("database not migrated: run manage.py migrate; missing: %(named)s") % {"named": named}


def refuse_unmigrated(using: str = DEFAULT_DB_ALIAS) -> None:
    """CommandError (one line, exit status 1) when a migration is missing. A database that does
    not answer is said, and the process starts as it did before this check: an outage is not a
    schema problem, and a worker that exits during one would take honcho's other processes down."""
    try:
        missing = missing_migrations(using)
    except OperationalError as exc:
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        print(gettext("retryops: cannot check the database's migrations (%(error)s); starting anyway") % {
            "error": first_line}, file=sys.stderr)
        return
    if missing:
        raise CommandError(describe(missing))
