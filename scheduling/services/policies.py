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
    Every refusal is a BadPolicy (code bad_policy) naming the source and the entry. With
    `only_missing`, policies that exist already are left as they are (the admin may have edited
    them since); the whole document is still checked. Returns the policies it saved."""
    import yaml

    from scheduling.policies import clean_policy

    actor = name_of(actor, field="actor", what=gettext_lazy("who loads the policies"))
    if not isinstance(text, str):
        raise BadPolicy(_("%(source)s: expected the YAML document as text, got %(type)s") % {
            "source": source, "type": type(text).__name__}, source=source)
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise BadPolicy(_("%(source)s: not valid YAML: %(error)s") % {"source": source, "error": exc},
                        source=source) from None
    if not isinstance(document, dict) or not isinstance(document.get("policies"), list):
        raise BadPolicy(_("%(source)s: expected a mapping with a 'policies' list") % {"source": source},
                        source=source)
    cleaned, names = [], set()
    for n, entry in enumerate(document["policies"]):
        label = f"policies[{n}]" + (f" ({entry['name']})" if isinstance(entry, dict) and "name" in entry else "")
        try:
            data = clean_policy(entry)
        except BadPolicy as exc:
            raise BadPolicy(f"{source}: {label}: {exc}", source=source, entry=n, **exc.details) from None
        if data["name"] in names:
            raise BadPolicy(_("%(source)s: %(entry)s: policy name %(name)r appears twice") % {
                "source": source, "entry": label, "name": data["name"]}, source=source, entry=n)
        names.add(data["name"])
        cleaned.append(data)
    with transaction.atomic():
        if only_missing:
            existing = set(RetryPolicy.objects.select_for_update().filter(name__in=names).values_list("name", flat=True))
            cleaned = [data for data in cleaned if data["name"] not in existing]
        return [save_retry_policy(data=data, actor=actor) for data in cleaned]
