"""Retry policies: saved with a record of each change, loaded from YAML all or none."""

from django.db import transaction

from scheduling.models import RetryPolicy

POLICY_FIELDS = ("description", "max_attempts", "backoff", "initial_delay_seconds", "multiplier", "max_delay_seconds",
                 "retryable_error_patterns", "non_retryable_error_patterns", "same_resource_on_retry",
                 "deadline_seconds", "probation_cooldown_seconds")


def policy_snapshot(policy: RetryPolicy) -> dict:
    return {field: getattr(policy, field) for field in POLICY_FIELDS}


def save_retry_policy(*, data: dict, actor: str) -> RetryPolicy:
    """Create or change one policy from validated data, recording who changed what."""
    from scheduling.models import RetryPolicyChange

    with transaction.atomic():
        policy = RetryPolicy.objects.select_for_update().filter(name=data["name"]).first()
        before = policy_snapshot(policy) if policy else {}
        if policy is None:
            policy = RetryPolicy(name=data["name"])
        for field in POLICY_FIELDS:
            setattr(policy, field, data[field])
        after = policy_snapshot(policy)
        if before == after:
            return policy
        policy.save()
        RetryPolicyChange.objects.create(policy=policy, changed_by=actor[:200], before=before, after=after)
    return policy


def load_retry_policies(*, text: str, source: str, actor: str) -> list[RetryPolicy]:
    """Load every policy of a YAML document, all or none: a bad field anywhere loads nothing."""
    import yaml

    from scheduling.policies import PolicyError, clean_policy

    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise PolicyError(f"{source}: not valid YAML: {exc}") from None
    if not isinstance(document, dict) or not isinstance(document.get("policies"), list):
        raise PolicyError(f"{source}: expected a mapping with a 'policies' list")
    cleaned, names = [], set()
    for n, entry in enumerate(document["policies"]):
        label = f"policies[{n}]" + (f" ({entry['name']})" if isinstance(entry, dict) and "name" in entry else "")
        try:
            data = clean_policy(entry)
        except PolicyError as exc:
            raise PolicyError(f"{source}: {label}: {exc}") from None
        if data["name"] in names:
            raise PolicyError(f"{source}: {label}: policy name {data['name']!r} appears twice")
        names.add(data["name"])
        cleaned.append(data)
    with transaction.atomic():
        return [save_retry_policy(data=data, actor=actor) for data in cleaned]
