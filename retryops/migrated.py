"""Whether the database has every migration this code needs: a worker, a cron or a web process
started against an empty or older database would otherwise fail later, on a missing table or
column in the middle of an attempt. Cheap enough for every readiness probe: the migrations on
disk are read once per process, then one query of django_migrations."""

import functools

from django.core.management.base import CommandError
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.migrations.loader import MigrationLoader
from django.db.migrations.recorder import MigrationRecorder

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
    named = ", ".join(missing[:NAMED]) + (f" and {len(missing) - NAMED} more" if len(missing) > NAMED else "")
    return f"database not migrated: run manage.py migrate; missing: {named}"


def refuse_unmigrated(using: str = DEFAULT_DB_ALIAS) -> None:
    """CommandError (one line, exit status 1) when a migration is missing."""
    missing = missing_migrations(using)
    if missing:
        raise CommandError(describe(missing))
