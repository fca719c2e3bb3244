"""Retry policies: saved with a record of each change, loaded from YAML all or none, removed only when pruned."""

from collections.abc import Iterable
from dataclasses import dataclass, field

from django.db import transaction
from django.db.models import ProtectedError
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from audit.choices import AuditAction
from audit.services import record_audit
from scheduling.errors import BadPolicy
from scheduling.models import RetryPolicy
from scheduling.services.tasks import name_of

POLICY_FIELDS = ("description", "max_attempts", "backoff", "initial_delay_seconds", "multiplier", "max_delay_seconds",
                 "retryable_error_patterns", "non_retryable_error_patterns", "same_resource_on_retry",
                 "deadline_seconds", "probation_cooldown_seconds")


def policy_snapshot(policy: RetryPolicy) -> dict:
    return {field: getattr(policy, field) for field in POLICY_FIELDS}


def save_retry_policy(*, data: dict, actor: str, fields: Iterable[str] | None = None) -> RetryPolicy:
    """Create or change one policy from validated data, recording who changed what (a policy
    change row and an audit entry); saving it unchanged records nothing. With `fields` (what a
    change page edited), only those fields of `data` are written, over the policy as it is under
    its row lock, and the result is checked again as a whole (BadPolicy naming the field): another
    editor's change to another field since the page was read stays."""
    from scheduling.models import RetryPolicyChange
    from scheduling.policies import clean_policy

    actor = name_of(actor, field="actor", what=gettext_lazy("who changes the policy"))
    with transaction.atomic():
        policy = RetryPolicy.objects.select_for_update().filter(name=data["name"]).first()
        before = policy_snapshot(policy) if policy else {}
        if policy is None:
            policy = RetryPolicy(name=data["name"])
        elif fields is not None:
            merged = {**before, **{field: data[field] for field in fields if field in POLICY_FIELDS}}
            data = clean_policy({"name": policy.name, **{field: value for field, value in merged.items()
                                                         if value is not None or field == "deadline_seconds"}})
        for field in POLICY_FIELDS:
            setattr(policy, field, data[field])
        after = policy_snapshot(policy)
        if before == after:
            return policy
        policy.save()
        RetryPolicyChange.objects.create(policy=policy, changed_by=actor, before=before, after=after)
        if before:
            changed = [field for field in POLICY_FIELDS if before[field] != after[field]]
            record_audit(action=AuditAction.POLICY_CHANGE, target=policy, actor=actor,
                         before={field: before[field] for field in changed},
                         after={field: after[field] for field in changed})
        else:
            record_audit(action=AuditAction.POLICY_CREATE, target=policy, before=None, after=after, actor=actor)
    return policy


PATTERN_FIELDS = ("retryable_error_patterns", "non_retryable_error_patterns")


@dataclass
class PolicyLoad:
    """What loading a policy file changes, or in a dry run would change: the policies it adds and
    changes (with their changed fields), and what the file lacks, kept unless pruned: patterns
    ("default: non_retryable_error_patterns 'banned'") and whole policies."""

    added: list[str] = field(default_factory=list)
    changed: dict[str, list[str]] = field(default_factory=dict)
    lacking_patterns: list[str] = field(default_factory=list)
    lacking_policies: list[str] = field(default_factory=list)
    pruned: bool = False


def load_retry_policies(*, text: str, source: str, actor: str, only_missing: bool = False,
                        prune: bool = False) -> PolicyLoad:
    """Load every policy of a YAML document, all or none: a bad field anywhere loads nothing.
    Every refusal is a BadPolicy (code bad_policy) naming the source and the entry. A load never
    removes what the file lacks (a file cut short is often valid YAML with fewer patterns or
    policies): a policy's patterns missing from the file are kept after the file's, policies
    missing from it stay; with `prune` both go (a policy tasks or batch configs use is refused).
    With `only_missing`, policies that exist already are left as they are (the admin may have
    edited them since); the whole document is still checked."""
    actor = name_of(actor, field="actor", what=gettext_lazy("who loads the policies"))
    cleaned = _read_policy_file(text=text, source=source)
    with transaction.atomic():
        existing = {policy.name: policy for policy in RetryPolicy.objects.select_for_update().order_by("name")}
        load, merged = _plan(cleaned, existing, only_missing=only_missing, prune=prune)
        for data in merged:
            save_retry_policy(data=data, actor=actor)
        for name in load.lacking_policies if prune else ():
            _delete_policy(existing[name], actor=actor, source=source)
    return load


def preview_retry_policies(*, text: str, source: str, only_missing: bool = False, prune: bool = False) -> PolicyLoad:
    """What load_retry_policies would do with the same arguments; writes nothing."""
    cleaned = _read_policy_file(text=text, source=source)
    existing = {policy.name: policy for policy in RetryPolicy.objects.order_by("name")}
    return _plan(cleaned, existing, only_missing=only_missing, prune=prune)[0]


def _plan(cleaned: list[dict], existing: dict[str, RetryPolicy], *, only_missing: bool,
          prune: bool) -> tuple[PolicyLoad, list[dict]]:
    """The load and the policies' data to save."""
    load, merged = PolicyLoad(pruned=prune), []
    for data in cleaned:
        policy = existing.get(data["name"])
        if policy is None:
            load.added.append(data["name"])
            merged.append(data)
            continue
        if only_missing:
            continue
        data = dict(data)
        for field_name in PATTERN_FIELDS:
            in_file = {entry["pattern"] for entry in data[field_name]}
            lacking = [entry for entry in getattr(policy, field_name) if entry["pattern"] not in in_file]
            load.lacking_patterns += [f"{policy.name}: {field_name} {entry['pattern']!r}" for entry in lacking]
            if not prune:
                data[field_name] = data[field_name] + lacking
        changed = [field_name for field_name in POLICY_FIELDS if getattr(policy, field_name) != data[field_name]]
        if changed:
            load.changed[policy.name] = changed
            merged.append(data)
    names = {data["name"] for data in cleaned}
    load.lacking_policies = [name for name in existing if name not in names]
    return load, merged


def _delete_policy(policy: RetryPolicy, *, actor: str, source: str) -> None:
    """Remove a policy the file no longer has (load_retry_policies with prune), audited."""
    before = policy_snapshot(policy)
    record_audit(action=AuditAction.POLICY_DELETE, target=policy, before=before, after=None, actor=actor)
    try:
        # The collector refuses before deleting anything; the caller's transaction then ends with the error.
        policy.delete()
    except ProtectedError:
        raise BadPolicy(_("%(source)s: policy %(name)r is not in the file, but tasks or batch configs use it, so "
                          "--prune cannot remove it; nothing was loaded") % {"source": source, "name": policy.name},
                        source=source, policy=policy.name) from None


def _read_policy_file(*, text: str, source: str) -> list[dict]:
    """The policies of a YAML document, each validated; BadPolicy naming the source, line and entry."""
    import yaml

    from scheduling.policies import clean_policy

    if not isinstance(text, str):
        raise BadPolicy(_("%(source)s: expected the YAML document as text, got %(type)s") % {
            "source": source, "type": type(text).__name__}, source=source)
    try:
        document = yaml.safe_load(text)
        # The same text as nodes, which know their lines: each refusal below names the line of
        # the key it is about (or of the entry that lacks it).
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        raise BadPolicy(_("%(source)s, %(where)s: not valid YAML: %(error)s") % {
            "source": source, "where": _yaml_place(exc), "error": _yaml_problem(exc)},
            source=source, line=_yaml_line(exc)) from None
    if document is None:
        raise BadPolicy(_("%(source)s: the file is empty: expected a mapping with a 'policies' list") % {
            "source": source}, source=source)
    if not isinstance(document, dict) or not isinstance(document.get("policies"), list):
        line = _line_of(root, ["policies"])
        raise BadPolicy(_("%(source)s, line %(line)s: expected a mapping with a 'policies' list") % {
            "source": source, "line": line}, source=source, line=line)
    cleaned, names = [], set()
    for n, entry in enumerate(document["policies"]):
        label = f"policies[{n}]" + (f" ({entry['name']})" if isinstance(entry, dict) and "name" in entry else "")
        try:
            data = clean_policy(entry)
        except BadPolicy as exc:
            line = _line_of(root, ["policies", n, *_field_path(exc.details.get("field", ""))])
            raise BadPolicy(_("%(source)s, line %(line)s: %(entry)s: %(error)s") % {
                "source": source, "line": line, "entry": label, "error": exc},
                source=source, entry=n, line=line, **exc.details) from None
        if data["name"] in names:
            line = _line_of(root, ["policies", n, "name"])
            raise BadPolicy(_("%(source)s, line %(line)s: %(entry)s: policy name %(name)r appears twice") % {
                "source": source, "line": line, "entry": label, "name": data["name"]},
                source=source, entry=n, line=line)
        names.add(data["name"])
        cleaned.append(data)
    return cleaned


def _field_path(field: str) -> list:
    """"non_retryable_error_patterns[3].action" as keys and indexes: [..., 3, "action"]."""
    import re

    return [int(index) if index else key for key, index in re.findall(r"(\w+)|\[(\d+)\]", field)]


def _line_of(root, path: list) -> int:
    """The line (from 1) of the deepest node of `path` the YAML document has: the key itself, or
    the entry that lacks it (a file cut short ends inside the last one)."""
    import yaml

    line, node = 1, root
    for step in path:
        found = None
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                if key.value == step:
                    found, line = value, key.start_mark.line + 1
                    break
        elif isinstance(node, yaml.SequenceNode) and isinstance(step, int) and step < len(node.value):
            found = node.value[step]
            line = found.start_mark.line + 1
        if found is None:
            break
        node = found
    return line


def _yaml_line(exc) -> int | None:
    mark = getattr(exc, "problem_mark", None)
    return mark.line + 1 if mark else None


def _yaml_place(exc) -> str:
    mark = getattr(exc, "problem_mark", None)
    return _("line %(line)s, column %(column)s") % {"line": mark.line + 1, "column": mark.column + 1} if mark \
        else _("somewhere")


def _yaml_problem(exc) -> str:
    """PyYAML's own words on one line, without its "<unicode string>" places."""
    problem = getattr(exc, "problem", None) or str(exc)
    context, mark = getattr(exc, "context", None), getattr(exc, "context_mark", None)
    if context and mark:
        return _("%(problem)s %(context)s that starts at line %(line)s, column %(column)s") % {
            "problem": problem, "context": context, "line": mark.line + 1, "column": mark.column + 1}
    return problem
