"""The permission walk's tools: every URL pattern under /admin/, the form a page offers (what a
browser would post), and the writes a request makes to PostgreSQL and to Redis."""

import re
from contextlib import contextmanager
from dataclasses import dataclass, field
from html.parser import HTMLParser

import django_rq
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import URLPattern, URLResolver, get_resolver

ADMIN_PREFIX = "admin/"

# A statement that writes, and the table it writes to. SELECT ... FOR UPDATE is not one; an
# UPDATE is "UPDATE <table> SET" (ON CONFLICT DO UPDATE SET belongs to an INSERT, caught as such).
_WRITES = re.compile(
    r'\b(?:INSERT\s+INTO|DELETE\s+FROM|TRUNCATE(?:\s+TABLE)?)\s+"?(\w+)"?|\bUPDATE\s+"?(\w+)"?\s+SET\b', re.I)
# Logging in writes the session and the user's last_login: bookkeeping, not a change of state.
_LAST_LOGIN = re.compile(r'UPDATE "auth_user" SET "last_login" = [^,]* WHERE "auth_user"\."id" = ')
SESSION_TABLE = "django_session"


def routes_under(start: str) -> dict[str, URLPattern]:
    """Every URL pattern of the project whose full route starts with `start`, by that route."""
    found: dict[str, URLPattern] = {}

    def walk(patterns, prefix: str) -> None:
        for pattern in patterns:
            route = prefix + str(pattern.pattern)
            if isinstance(pattern, URLResolver):
                walk(pattern.url_patterns, route)
            elif isinstance(pattern, URLPattern) and route.startswith(start):
                assert route not in found, f"two patterns with the route {route}"
                found[route] = pattern

    walk(get_resolver().url_patterns, "")
    return found


def admin_routes() -> dict[str, URLPattern]:
    """Every URL pattern of the project under /admin/ (the admin site, each ModelAdmin's own
    views, django-rq's pages, the dashboard), by its full route."""
    return routes_under(ADMIN_PREFIX)


class _Forms(HTMLParser):
    """The forms of a page with the values a browser would submit: checked boxes, selected
    options (else a single select's first), textareas; no buttons, no disabled fields."""

    def __init__(self):
        super().__init__()
        self.forms: list[dict] = []
        self._form = self._select = self._textarea = self._option = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "form":
            self._form = {"action": a.get("action") or "", "method": (a.get("method") or "get").lower(),
                          "fields": []}
            self.forms.append(self._form)
        elif self._form is None or "disabled" in a:
            return
        elif tag == "input" and a.get("name"):
            kind = (a.get("type") or "text").lower()
            if kind in ("submit", "button", "image", "reset", "file"):
                return
            if kind in ("checkbox", "radio") and "checked" not in a:
                return
            self._form["fields"].append((a["name"], a.get("value", "on" if kind in ("checkbox", "radio") else "")))
        elif tag == "select" and a.get("name"):
            self._select = {"name": a["name"], "multiple": "multiple" in a, "chosen": [], "first": None}
        elif tag == "option" and self._select is not None:
            self._option = {"value": a.get("value"), "text": "", "selected": "selected" in a}
        elif tag == "textarea" and a.get("name"):
            self._textarea = {"name": a["name"], "text": ""}

    def handle_data(self, data):
        if self._textarea is not None:
            self._textarea["text"] += data
        if self._option is not None:
            self._option["text"] += data

    def handle_endtag(self, tag):
        if tag == "option" and self._option is not None:
            option, self._option = self._option, None
            value = option["value"] if option["value"] is not None else option["text"].strip()
            if self._select["first"] is None:
                self._select["first"] = value
            if option["selected"]:
                self._select["chosen"].append(value)
        elif tag == "select" and self._select is not None:
            select, self._select = self._select, None
            chosen = select["chosen"] or ([] if select["multiple"] or select["first"] is None else [select["first"]])
            self._form["fields"].extend((select["name"], value) for value in chosen)
        elif tag == "textarea" and self._textarea is not None:
            area, self._textarea = self._textarea, None
            # A browser drops the newline right after <textarea>.
            self._form["fields"].append((area["name"], area["text"].removeprefix("\r\n").removeprefix("\n")))
        elif tag == "form":
            self._form = None


def page_form(html: str, path: str) -> dict[str, list[str]]:
    """What the page at `path` posts back to itself: its first POST form whose action is the
    page (not the language switcher's, not the logout button's)."""
    parser = _Forms()
    parser.feed(html)
    for form in parser.forms:
        if form["method"] == "post" and (form["action"] in ("", ".") or form["action"].split("?")[0] == path):
            data: dict[str, list[str]] = {}
            for name, value in form["fields"]:
                data.setdefault(name, []).append(value)
            return data
    raise AssertionError(f"{path} offers no form that posts to itself")


@dataclass
class Writes:
    """The tables a request wrote to (but the session and last_login) and the Redis keys it changed."""

    tables: list[str] = field(default_factory=list)
    statements: list[str] = field(default_factory=list)
    redis_keys: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.tables or self.redis_keys)

    def __str__(self) -> str:
        said = [f"{table}: {sql[:300]}" for table, sql in zip(self.tables, self.statements)]
        said += [f"redis {key}" for key in self.redis_keys]
        return "; ".join(said) or "nothing"


def _redis_state(redis) -> dict[bytes, bytes | None]:
    return {key: redis.dump(key) for key in redis.scan_iter(count=1000)}


@contextmanager
def writes():
    """Collect what the block writes: statements that insert, update, delete or truncate a table,
    and Redis keys (of the tests' Redis database) created, changed or removed."""
    redis = django_rq.get_connection("default")
    before = _redis_state(redis)
    found = Writes()
    with CaptureQueriesContext(connection) as queries:
        yield found
    for query in queries.captured_queries:
        sql = query["sql"]
        if _LAST_LOGIN.match(sql):
            continue
        for match in _WRITES.finditer(sql):
            table = match.group(1) or match.group(2)
            if table != SESSION_TABLE:
                found.tables.append(table)
                found.statements.append(sql)
    after = _redis_state(redis)
    found.redis_keys = sorted(key.decode() for key in before.keys() | after.keys() if before.get(key) != after.get(key))
