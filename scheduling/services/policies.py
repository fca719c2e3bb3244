"""Retry policies: saved with a record of each change, loaded from YAML all or none."""

from collections.abc import Iterable

from django.db import transaction
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


def load_retry_policies(*, text: str, source: str, actor: str, only_missing: bool = False) -> list[RetryPolicy]:
    """Load every policy of a YAML document, all or none: a bad field anywhere loads nothing.
    The document must end with the line `...` (YAML's end of document), so that one cut short
    is refused. Every refusal is a BadPolicy (code bad_policy) naming the source and the entry.
    With `only_missing`, policies that exist already are left as they are (the admin may have
    edited them since); the whole document is still checked. Returns the policies it saved."""
    import yaml

    from scheduling.policies import clean_policy

    actor = name_of(actor, field="actor", what=gettext_lazy("who loads the policies"))
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
    _refuse_if_cut_short(text, source)
    with transaction.atomic():
        if only_missing:
            existing = set(RetryPolicy.objects.select_for_update().filter(name__in=names).values_list("name", flat=True))
            cleaned = [data for data in cleaned if data["name"] not in existing]
        return [save_retry_policy(data=data, actor=actor) for data in cleaned]


def _refuse_if_cut_short(text: str, source: str) -> None:
    """BadPolicy unless `text` ends with the line `...`. A document cut at a line boundary is
    often still a valid one with fewer patterns or policies, and one cut mid-line may be too (a
    3600 cut to 36); only an explicit end tells them from a whole one. Checked after the entries,
    so that a mistake in what is there is named first, with its line. YAML itself refuses a
    second document after the `...`."""
    if text.rstrip().rpartition("\n")[2] == "...":
        return
    lines = text.splitlines()
    if text and not text.endswith("\n"):
        raise BadPolicy(_("%(source)s, line %(line)s: the file ends in the middle of a line (%(text)r): it looks cut "
                          "short; nothing was loaded (if it is complete, end it with a newline and the line `...`)") % {
            "source": source, "line": len(lines), "text": lines[-1].strip()[:60]}, source=source, line=len(lines))
    raise BadPolicy(_("%(source)s: it does not end with the line `...` (YAML's end of document), so it may be cut "
                      "short; nothing was loaded (if it is complete, add `...` as its last line)") % {
        "source": source}, source=source)


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
