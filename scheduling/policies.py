"""Retry policies: validation (shared by the YAML loader and the admin), backoff, and what a
failure's text tells a policy to do."""

import math
import random
from dataclasses import dataclass

import regex
from django.utils.translation import gettext as _

from resources.choices import FailureCategory
from resources.classification import (
    MATCH_TIMEOUT_SECONDS, PROBE_TEXT, Classification, compile_pattern, compile_patterns, error_text, matches,
    times_out_on_probe,
)
from resources.services import MAX_PROBATION_SECONDS
from retryops.jsonsafe import check_text
from scheduling.choices import Backoff, PatternAction
from scheduling.errors import BadPolicy, too_long

REQUIRED_FIELDS = (
    "name", "max_attempts", "backoff", "initial_delay_seconds", "multiplier", "max_delay_seconds",
    "retryable_error_patterns", "non_retryable_error_patterns", "same_resource_on_retry",
)
OPTIONAL_FIELDS = ("description", "deadline_seconds", "probation_cooldown_seconds")
DEFAULT_ACTION = {
    "retryable_error_patterns": PatternAction.RETRY_SAME_RESOURCE,
    "non_retryable_error_patterns": PatternAction.QUARANTINE,
}


# Upper bounds, so that every allowed policy turns into times the scheduler can compute
# (now + timedelta(seconds=...)) and columns can hold: a month of delay or deadline, a week of
# probation (the longest a failed probe's doubling reaches), an attempt count a person would mean.
MAX_ATTEMPTS = 1000
MAX_DELAY_SECONDS = 30 * 24 * 3600
MAX_MULTIPLIER = 100
MAX_PROBATION_COOLDOWN_SECONDS = MAX_PROBATION_SECONDS
# RetryPolicy.name's column (models imports nothing from here, but this module loads before apps do).
MAX_NAME_LENGTH = 100


def _number(data: dict, field: str, *, minimum: float, maximum: float, integer: bool = False) -> float | int:
    value = data[field]
    kinds = (int,) if integer else (int, float)
    names = {"field": field, "value": value, "minimum": minimum, "maximum": maximum}
    if isinstance(value, bool) or not isinstance(value, kinds):
        raise BadPolicy((_("%(field)s must be a whole number, got %(value)r") if integer else
                         _("%(field)s must be a number, got %(value)r")) % names, field=field)
    # NaN passes every comparison, infinity every lower bound; both reach timedelta() later.
    if not math.isfinite(value):
        raise BadPolicy(_("%(field)s must be a finite number, got %(value)r") % names, field=field)
    if value < minimum:
        raise BadPolicy(_("%(field)s must be at least %(minimum)g, got %(value)r") % names, field=field)
    if value > maximum:
        raise BadPolicy(_("%(field)s must be at most %(maximum)g, got %(value)r") % names, field=field)
    return value


def _text(field: str, value: str) -> str:
    problem = check_text(value)
    if problem:
        raise BadPolicy(_("%(field)s %(problem)s, which PostgreSQL cannot store") % {
            "field": field, "problem": problem}, field=field)
    return value


def clean_patterns(field: str, entries) -> list[dict]:
    """Normalise a pattern list to [{"pattern", "action", "probation"}]; a bad entry or regex names itself."""
    if not isinstance(entries, list):
        raise BadPolicy(_("%(field)s must be a list of regexes or {pattern, action} entries, got %(value)r") % {
            "field": field, "value": entries}, field=field)
    cleaned = []
    for n, entry in enumerate(entries):
        where = f"{field}[{n}]"
        if isinstance(entry, str):
            entry = {"pattern": entry}
        if not isinstance(entry, dict) or not isinstance(entry.get("pattern"), str) or not entry["pattern"]:
            raise BadPolicy(_("%(field)s must be a regex or a mapping with a 'pattern' string, got %(value)r") % {
                "field": where, "value": entry}, field=where)
        _text(where, entry["pattern"])
        unknown = set(entry) - {"pattern", "action", "probation"}
        if unknown:
            raise BadPolicy(_("%(field)s has unknown keys: %(keys)s") % {
                "field": where, "keys": ", ".join(sorted(unknown))}, field=where)
        action = entry.get("action", DEFAULT_ACTION[field])
        if action not in PatternAction.values:
            raise BadPolicy(_("%(field)s.action must be one of %(choices)s, got %(value)r") % {
                "field": where, "choices": ", ".join(PatternAction.values), "value": action}, field=where)
        probation = entry.get("probation", False)
        if not isinstance(probation, bool):
            raise BadPolicy(_("%(field)s.probation must be true or false, got %(value)r") % {
                "field": where, "value": probation}, field=where)
        try:
            # Compiled as matching compiles it; the regex module's own reason is quoted as it says it.
            compiled = compile_pattern(entry["pattern"])
        except regex.error as exc:
            raise BadPolicy(_("%(field)s: invalid error pattern %(pattern)r: %(reason)s") % {
                "field": where, "pattern": entry["pattern"], "reason": exc}, field=where) from None
        if times_out_on_probe(compiled):
            raise BadPolicy(_("%(field)s: error pattern %(pattern)r took longer than %(seconds)ss on a near miss of "
                              "%(length)d characters (as “(a+)+$” does), so it would never match a long error; "
                              "write it without a repeat inside a repeat (as “a+$”)") % {
                "field": where, "pattern": entry["pattern"], "seconds": MATCH_TIMEOUT_SECONDS,
                "length": len(PROBE_TEXT)}, field=where)
        cleaned.append({"pattern": entry["pattern"], "action": action, "probation": probation})
    return cleaned


def clean_policy(data) -> dict:
    """Validate one policy definition and return the model's field values."""
    if not isinstance(data, dict):
        raise BadPolicy(_("a policy must be a mapping of fields, got %(value)r") % {"value": data})
    for field in REQUIRED_FIELDS:
        if field not in data:
            raise BadPolicy(_("missing field %(field)r") % {"field": field}, field=field)
    unknown = set(data) - set(REQUIRED_FIELDS) - set(OPTIONAL_FIELDS)
    if unknown:
        raise BadPolicy(_("unknown fields: %(fields)s") % {"fields": ", ".join(sorted(map(str, unknown)))})
    if not isinstance(data["name"], str) or not data["name"].strip():
        raise BadPolicy(_("name must be a non-empty string, got %(value)r") % {"value": data["name"]}, field="name")
    if len(data["name"].strip()) > MAX_NAME_LENGTH:
        raise BadPolicy(too_long("name", len(data["name"].strip()), MAX_NAME_LENGTH), field="name")
    if data["backoff"] not in Backoff.values:
        raise BadPolicy(_("backoff must be one of %(choices)s, got %(value)r") % {
            "choices": ", ".join(Backoff.values), "value": data["backoff"]}, field="backoff")
    if not isinstance(data["same_resource_on_retry"], bool):
        raise BadPolicy(_("same_resource_on_retry must be true or false, got %(value)r") % {
            "value": data["same_resource_on_retry"]}, field="same_resource_on_retry")
    cleaned = {
        "name": _text("name", data["name"].strip()),
        "description": _text("description", str(data.get("description") or "")),
        "max_attempts": _number(data, "max_attempts", minimum=1, maximum=MAX_ATTEMPTS, integer=True),
        "backoff": data["backoff"],
        "initial_delay_seconds": float(_number(data, "initial_delay_seconds", minimum=0, maximum=MAX_DELAY_SECONDS)),
        "multiplier": float(_number(data, "multiplier", minimum=1, maximum=MAX_MULTIPLIER)),
        "max_delay_seconds": float(_number(data, "max_delay_seconds", minimum=0, maximum=MAX_DELAY_SECONDS)),
        "same_resource_on_retry": data["same_resource_on_retry"],
        "deadline_seconds": None,
        "probation_cooldown_seconds": 1800,
    }
    if data.get("probation_cooldown_seconds") is not None:
        cleaned["probation_cooldown_seconds"] = _number(data, "probation_cooldown_seconds", minimum=1,
                                                            maximum=MAX_PROBATION_COOLDOWN_SECONDS, integer=True)
    if cleaned["max_delay_seconds"] < cleaned["initial_delay_seconds"]:
        raise BadPolicy(_("max_delay_seconds must be at least initial_delay_seconds"), field="max_delay_seconds")
    if data.get("deadline_seconds") is not None:
        cleaned["deadline_seconds"] = float(_number(data, "deadline_seconds", minimum=1, maximum=MAX_DELAY_SECONDS))
    for field in ("retryable_error_patterns", "non_retryable_error_patterns"):
        cleaned[field] = clean_patterns(field, data[field])
    return cleaned


def retry_delay(*, backoff: str, attempt: int, initial: float, multiplier: float, maximum: float,
                rng: random.Random | None = None) -> float:
    """Seconds to wait after failed attempt number `attempt` (1 = the first)."""
    if backoff == Backoff.FIXED:
        return min(initial, maximum)
    # Compared in logarithms, because multiplier ** attempt overflows a float long before
    # attempts run out.
    exponent = attempt - 1
    if initial <= 0:
        capped = 0.0
    elif math.log(initial) + exponent * math.log(multiplier) >= math.log(maximum):
        capped = maximum
    else:
        capped = initial * multiplier ** exponent
    if backoff == Backoff.EXPONENTIAL:
        return capped
    if backoff == Backoff.EXPONENTIAL_JITTER:
        return (rng or random).uniform(0, capped)
    raise BadPolicy(f"unknown backoff {backoff!r}", field="backoff")


@dataclass(frozen=True)
class Verdict:
    """What a policy makes of one failure: its category, the action, and the rule that decided."""

    classification: Classification
    action: str
    probation: bool = False

    @property
    def category(self) -> str:
        return self.classification.category


def policy_verdict(policy, text: str) -> Verdict | None:
    """The verdict of the first of the policy's own patterns that matches `text` (non-retryable
    first), or None: the defaults decide (judge)."""
    for field, category in (
        ("non_retryable_error_patterns", FailureCategory.NON_RETRYABLE),
        ("retryable_error_patterns", FailureCategory.RETRYABLE),
    ):
        for entry in getattr(policy, field):
            if matches(compile_patterns((entry["pattern"],))[0], text):
                return Verdict(Classification(category, entry["pattern"], text), entry["action"], entry.get("probation", False))
    return None


def default_action(category: str) -> str:
    """The action of a failure no pattern of the policy's decided, by its category."""
    return DEFAULT_ACTION["non_retryable_error_patterns" if category == FailureCategory.NON_RETRYABLE
                          else "retryable_error_patterns"]


def judge(policy, error: BaseException | str) -> Verdict:
    """Match a failure against the policy's patterns (non-retryable first), then the defaults."""
    from resources.classification import classify

    found = policy_verdict(policy, error_text(error))
    if found is not None:
        return found
    verdict = classify(error)
    return Verdict(verdict, default_action(verdict.category))
