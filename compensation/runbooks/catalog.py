"""Runbooks: named compensation procedures in config/runbooks/<name>.md, Markdown steps for the
operator under a YAML front matter that names the work orders they apply to and the actions an
operator may run from them. Each action is a Python callable named by its dotted path (like the
flows of scheduling.flows), with a JSON Schema for its input; `external: true` marks an action
that moves state outside the app, which needs a second operator's approval before it runs.

Loading checks everything and refuses a bad runbook whole, naming its file and field. Reads
only: the runs are written by compensation.runbooks.services.

    ---
    name: replay-after-upstream-outage
    title: Replay after an upstream outage
    applies_to:
      flows: [http_call]                 # empty or missing: any flow
      signatures: ['time(d)?[ _-]?out']  # regexes searched in the error signature; empty: any
    actions:
      - name: replay_dead_letters
        callable: compensation.runbooks.actions.dead_letters.replay_dead_letters
        description: Replay the work order's open dead letters on their resources.
        external: false
        input_schema: {type: object, properties: {any_resource: {type: boolean}}}
    ---
    1. Check the upstream's status page ...
"""

import functools
import re
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import frontmatter
import markdown
import nh3
import yaml
from django.conf import settings
from django.utils.module_loading import import_string
from django.utils.translation import gettext as _
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError, ValidationError, best_match
from jsonschema.validators import validator_for

from compensation.errors import CompensationError
from resources.classification import compile_patterns, matches
from retryops.jsonsafe import UnstorableValue, refuse_unstorable

NAME = r"^[a-z0-9][a-z0-9_-]{0,99}$"

# The shape of a runbook's front matter, checked before anything is imported or compiled, so
# a typo is named by its place ("actions[1].external") rather than failing somewhere later.
FRONT_MATTER_SCHEMA = {
    "type": "object",
    "required": ["name", "title", "actions"],
    "additionalProperties": False,
    "properties": {
        "name": {"type": "string", "pattern": NAME},
        "title": {"type": "string", "minLength": 1, "maxLength": 300},
        "applies_to": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "flows": {"type": "array", "items": {"type": "string", "minLength": 1, "maxLength": 100}},
                "signatures": {"type": "array", "items": {"type": "string", "minLength": 1}},
            },
        },
        "actions": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["name", "callable", "description", "input_schema"],
                "additionalProperties": False,
                "properties": {
                    "name": {"type": "string", "pattern": NAME},
                    "callable": {"type": "string", "pattern": r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)+$"},
                    "description": {"type": "string", "minLength": 1},
                    "external": {"type": "boolean"},
                    "input_schema": {"type": "object"},
                },
            },
        },
    },
}


class RunbookInvalid(CompensationError):
    """A runbook file that cannot be used; details: `file`, `field`."""

    code = "bad_runbook"

    def __init__(self, message: str, *, file: str, field: str):
        super().__init__(f"{file}: {field}: {message}", file=file, field=field)


class UnknownRunbook(CompensationError):
    """No runbook of that name in the runbook folder; details: `runbook`, `known`."""

    code = "unknown_runbook"


class UnknownRunbookAction(CompensationError):
    """The runbook has no action of that name; details: `runbook`, `action`, `known`."""

    code = "unknown_runbook_action"


class ApprovalRequired(CompensationError):
    """An external action asked to run before a second operator approved it; details: `run_id`."""

    code = "approval_required"


class FourEyes(CompensationError):
    """The requester of a run tried to approve it, as themselves or through an API client acting as
    the same user; details: `run_id`, `actor`, `identity` (the user behind the actor)."""

    code = "four_eyes"


class TokenReused(CompensationError):
    """A token already names a different run (another work order, action or input); details:
    `token`, `run_id`."""

    code = "token_reused"


def field_of(error: ValidationError, root: str) -> str:
    """Where a jsonschema error is, as the operators write it: `input.refund.amount`,
    `actions[1].callable`; for a missing or unexpected key, that key."""
    place = root
    for part in error.absolute_path:
        place += f"[{part}]" if isinstance(part, int) else f".{part}"
    if error.validator == "required" and isinstance(error.instance, dict):
        missing = [key for key in error.validator_value if key not in error.instance]
        if missing:
            place += f".{missing[0]}"
    elif error.validator == "additionalProperties" and isinstance(error.instance, dict):
        allowed = set(error.schema.get("properties", {}))
        extra = sorted(key for key in error.instance if key not in allowed)
        if extra:
            place += f".{extra[0]}"
    return place.lstrip(".") or root


@dataclass(frozen=True)
class ActionContext:
    """What an action gets: the run, its work order, the validated input, and who asked,
    approved and runs it. `token` is the run's idempotency key: pass it on to external systems
    so a run retried by hand never acts twice there."""

    run_id: int
    work_order_id: int
    runbook: str
    action: str
    input: Any
    token: str
    requested_by: str
    approved_by: str
    actor: str


@dataclass(frozen=True)
class RunbookAction:
    """One action of a runbook: a callable(ActionContext) -> JSON-able result, raising to fail."""

    name: str
    callable_path: str
    description: str
    external: bool
    input_schema: dict = field(hash=False)

    def function(self) -> Callable[[ActionContext], Any]:
        return _callable(self.callable_path)

    def validator(self):
        return validator_for(self.input_schema, default=Draft202012Validator)(self.input_schema)


@dataclass(frozen=True)
class Runbook:
    """A loaded, checked runbook."""

    name: str
    title: str
    flows: tuple[str, ...]
    signatures: tuple[str, ...]
    actions: tuple[RunbookAction, ...]
    steps: str
    file: str

    def action(self, name: str) -> RunbookAction:
        for action in self.actions:
            if action.name == name:
                return action
        known = [a.name for a in self.actions]
        raise UnknownRunbookAction(
            _("runbook %(runbook)r has no action %(action)r; its actions: %(known)s") % {
                "runbook": self.name, "action": name, "known": ", ".join(known) or _("none")},
            runbook=self.name, action=name, known=known)

    def steps_html(self) -> str:
        """The steps as HTML for the admin, sanitized: a runbook is reviewed text, but the page
        it lands on carries an operator's session."""
        return nh3.clean(markdown.markdown(self.steps, extensions=["fenced_code", "tables", "sane_lists"]))

    def match(self, *, flow: str, error_signature: str) -> int:
        """How well this runbook fits a work order of `flow` and `error_signature`: 0 when it does
        not apply; higher for a signature match than for a flow match (the signature says more)."""
        if self.flows and flow not in self.flows:
            return 0
        if self.signatures and not any(matches(p, error_signature or "") for p in compile_patterns(self.signatures)):
            return 0
        return 1 + (2 if self.signatures else 0) + (1 if self.flows else 0)


@functools.cache
def _callable(path: str) -> Callable:
    return import_string(path)


def _action(data: dict, *, file: str, where: str) -> RunbookAction:
    schema = data["input_schema"]
    try:
        validator_for(schema, default=Draft202012Validator).check_schema(schema)
    except SchemaError as exc:
        raise RunbookInvalid(f"not a valid JSON Schema: {exc.message}",
                             file=file, field=field_of(exc, f"{where}.input_schema")) from None
    try:
        function = _callable(data["callable"])
    except ImportError as exc:
        raise RunbookInvalid(f"{data['callable']!r} cannot be imported: {exc}", file=file,
                             field=f"{where}.callable") from None
    if not callable(function):
        raise RunbookInvalid(f"{data['callable']!r} is a {type(function).__name__}, not a callable", file=file,
                             field=f"{where}.callable")
    return RunbookAction(name=data["name"], callable_path=data["callable"], description=data["description"].strip(),
                         external=bool(data.get("external", False)), input_schema=schema)


def parse_runbook(text: str, *, file: str, expected_name: str | None = None) -> Runbook:
    """A runbook from the text of its file; RunbookInvalid naming `file` and the field otherwise."""
    try:
        post = frontmatter.loads(text)
    except yaml.YAMLError as exc:
        raise RunbookInvalid(f"the front matter is not YAML: {exc}", file=file, field="front matter") from None
    meta = post.metadata
    if not meta:
        raise RunbookInvalid("no YAML front matter (a block between two '---' lines at the top)", file=file,
                             field="front matter")
    error = best_match(Draft202012Validator(FRONT_MATTER_SCHEMA).iter_errors(meta))
    if error is not None:
        raise RunbookInvalid(error.message, file=file, field=field_of(error, ""))
    try:
        refuse_unstorable(meta, name="front matter")
    except UnstorableValue as exc:
        raise RunbookInvalid(str(exc).removeprefix(exc.path).strip(), file=file,
                             field=exc.path.removeprefix("front matter").lstrip(".") or "front matter") from None
    if expected_name is not None and meta["name"] != expected_name:
        raise RunbookInvalid(f"is {meta['name']!r}, but the file is named {expected_name}.md: they must agree",
                             file=file, field="name")
    applies = meta.get("applies_to") or {}
    signatures = tuple(applies.get("signatures") or ())
    for n, pattern in enumerate(signatures):
        try:
            compile_patterns((pattern,))
        except ValueError as exc:
            raise RunbookInvalid(str(exc), file=file, field=f"applies_to.signatures[{n}]") from None
    actions, seen = [], set()
    for n, data in enumerate(meta["actions"]):
        if data["name"] in seen:
            raise RunbookInvalid(f"a second action named {data['name']!r}", file=file, field=f"actions[{n}].name")
        seen.add(data["name"])
        actions.append(_action(data, file=file, where=f"actions[{n}]"))
    if not post.content.strip():
        raise RunbookInvalid("the runbook has no steps below its front matter", file=file, field="steps")
    return Runbook(name=meta["name"], title=meta["title"].strip(), flows=tuple(applies.get("flows") or ()),
                   signatures=signatures, actions=tuple(actions), steps=post.content.strip(), file=file)


def load_runbook(path: Path) -> Runbook:
    """The runbook in `path`, whose name must be the file's name without `.md`."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise RunbookInvalid(f"cannot be read: {exc}", file=str(path), field="file") from None
    return parse_runbook(text, file=str(path), expected_name=path.stem)


def load_runbooks(directory: Path | str | None = None) -> dict[str, Runbook]:
    """Every runbook of the folder (settings.RETRYOPS_RUNBOOK_DIR by default), by name; all or
    none: the first bad one raises RunbookInvalid."""
    folder = Path(directory or settings.RETRYOPS_RUNBOOK_DIR)
    if not folder.is_dir():
        raise RunbookInvalid("is not a folder (set RETRYOPS_RUNBOOK_DIR)", file=str(folder), field="folder")
    return {book.name: book for book in (load_runbook(path) for path in sorted(folder.glob("*.md")))}


_cache: dict[str, tuple[tuple, dict[str, Runbook]]] = {}
_cache_lock = threading.Lock()


def runbooks() -> dict[str, Runbook]:
    """The runbooks in force: loaded again when a file in the folder is added, changed or
    removed, so an edited runbook shows without a restart."""
    folder = Path(settings.RETRYOPS_RUNBOOK_DIR)
    files = sorted(folder.glob("*.md")) if folder.is_dir() else []
    stamp = tuple((p.name, p.stat().st_mtime_ns, p.stat().st_size) for p in files)
    with _cache_lock:
        cached = _cache.get(str(folder))
        if cached is None or cached[0] != stamp:
            cached = (stamp, load_runbooks(folder))
            _cache[str(folder)] = cached
        return cached[1]


def get_runbook(name: str) -> Runbook:
    """The runbook `name`, or UnknownRunbook listing the known ones."""
    books = runbooks()
    if not isinstance(name, str) or name not in books:
        raise UnknownRunbook(_("unknown runbook %(runbook)r; known runbooks: %(known)s") % {
                                 "runbook": name, "known": ", ".join(books) or _("none")},
                             runbook=name, known=list(books))
    return books[name]


def suggest_runbooks(*, flow: str, error_signature: str, named: str = "",
                     books: Iterable[Runbook] | None = None) -> list[Runbook]:
    """The runbooks that apply to a work order of `flow` and `error_signature`, best first; the
    one the work order names (`named`) leads whether or not it matches."""
    books = list(runbooks().values() if books is None else books)
    scored = [(10 if book.name == named else book.match(flow=flow, error_signature=error_signature), book)
              for book in books]
    return [book for score, book in sorted(scored, key=lambda s: (-s[0], s[1].name)) if score > 0]


def suggest_for_work_order(work_order) -> list[Runbook]:
    """suggest_runbooks for a WorkOrder."""
    return suggest_runbooks(flow=work_order.flow, error_signature=work_order.error_signature,
                            named=work_order.runbook)


# A runbook run's token: what request_runbook_action takes (and the API's schema states).
TOKEN = re.compile(r"^[A-Za-z0-9._:@/+=-]{1,100}\Z")


def is_token(value: str) -> bool:
    return bool(TOKEN.match(value))
