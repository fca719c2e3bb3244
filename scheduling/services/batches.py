"""Automatic scheduling: each tick of a batch config starts its tasks, failed resources first if asked."""

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.core.exceptions import ValidationError
from django.core.validators import validate_slug
from django.db import IntegrityError, models, transaction
from django.db.models import Q
from django.db.models.functions import Now
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from audit.choices import AuditAction
from audit.services import record_audit
from resources.errors import PoolExhausted, ResourceUnavailable
from resources.selectors import get_pool
from retryops.errors import BadInput, DomainError
from retryops.inputs import record_id, whole_number
from retryops.jsonsafe import clean_text
from retryops.masking import keep_masked_secrets
from scheduling.errors import BadPolicy, too_long
from scheduling.flows import get_flow
from scheduling.models import BatchConfig, Task
from scheduling.policies import clean_patterns
from scheduling.selectors import failed_first_candidates, get_policy
from scheduling.services.tasks import name_of, parse_payload, start_batch_task

log = logging.getLogger(__name__)


@dataclass
class BatchTicks:
    """What one run_batches did: tasks started per config, and why the configs that failed did."""

    started: dict[str, int] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)


def run_batch(*, config: BatchConfig, now: datetime | None = None) -> list[Task]:
    """One tick of a batch config: start up to tasks_per_tick tasks, each on a resource claimed
    now. With retry_failed_first, recently failed retryable resources go first; quarantined ones
    never. last_tick_at is when the tick began: the cadence run_batches keeps is start to start,
    as the ops process's, so a long tick does not make the next one look early."""
    now = now or timezone.now()
    BatchConfig.objects.filter(pk=config.pk).update(last_tick_at=Now())
    started: list[Task] = []
    candidates = failed_first_candidates(config=config, now=now) if config.retry_failed_first else []
    while len(started) < config.tasks_per_tick and candidates:
        candidate = candidates.pop(0)
        try:
            with transaction.atomic():
                started.append(start_batch_task(config=config, resource=candidate))
        except ResourceUnavailable:
            continue  # taken since we looked
    while len(started) < config.tasks_per_tick:
        try:
            with transaction.atomic():
                started.append(start_batch_task(config=config))
        except PoolExhausted:
            break
    BatchConfig.objects.filter(pk=config.pk).update(last_error="")
    return started


def run_batches(*, now: datetime | None = None, every: float = 0) -> BatchTicks:
    """Tick every enabled batch config; with `every`, only those whose last tick is at least that
    many seconds old (bar a tenth) on the database's clock, so that a second run within the
    cadence (a new ops leader runs every step at once) starts no second batch. A config that fails
    is logged and its error recorded on it (last_error, last_tick_at); the others tick all the same."""
    now = now or timezone.now()
    ticks = BatchTicks()
    for config in BatchConfig.objects.filter(enabled=True).select_related("policy").order_by("name"):
        if every and not _take_tick(config, every):
            continue
        try:
            ticks.started[config.name] = len(run_batch(config=config, now=now))
        except Exception as exc:  # one bad config must not stop the others
            if isinstance(exc, DomainError):
                log.warning("batch config %s failed: %s", config.name, exc)
            else:
                log.exception("batch config %s failed", config.name)
            message = clean_text(f"{exc}" if isinstance(exc, DomainError) else f"{type(exc).__name__}: {exc}")[:4000]
            ticks.failed[config.name] = message
            BatchConfig.objects.filter(pk=config.pk).update(last_error=message)  # last_tick_at: its start
    return ticks


def _take_tick(config: BatchConfig, every: float) -> bool:
    """Whether this run may tick `config`: its last tick, stamped here on the database's clock (the
    one clock every ops host shares), is at least 0.9 `every` old. One statement, so two runs that
    race for it take it once."""
    recent = Q(last_tick_at__gt=Now() - timedelta(seconds=every * 0.9))
    return bool(BatchConfig.objects.filter(pk=config.pk).exclude(recent).update(last_tick_at=Now()))


# What an operator sets on a batch config; last_tick_at and last_error are the ticks' own.
BATCH_FIELDS = ("name", "pool", "flow", "policy", "payload", "enabled", "tasks_per_tick", "retry_failed_first",
                "recent_window_seconds", "retryable_error_patterns")


def _count(value, *, field: str, minimum: int) -> int:
    return whole_number(value, field=field, minimum=minimum, error=BadInput)


def _fits(value: str, field: str) -> str:
    limit = BatchConfig._meta.get_field(field).max_length
    if len(value) > limit:
        raise BadInput(too_long(field, len(value), limit), field=field)
    return value


def _batch_name(value) -> str:
    name = _fits(name_of(value, field="name", what=gettext_lazy("the batch config")), "name")
    try:
        validate_slug(name)
    except ValidationError:
        raise BadInput(_("batch config name %(name)r must be letters, digits, hyphens or underscores") % {
            "name": name}, field="name") from None
    return name


def _batch_flow(value) -> str:
    flow = _fits(name_of(value, field="flow", what=gettext_lazy("a flow")), "flow")
    get_flow(flow)
    return flow


def _batch_patterns(value) -> list[str]:
    field = "retryable_error_patterns"
    if not isinstance(value, list) or not all(isinstance(pattern, str) for pattern in value):
        raise BadPolicy(_("%(field)s must be a list of regexes, as strings, got %(value)r") % {
            "field": field, "value": value}, field=field)
    clean_patterns(field, value)
    return value


_BATCH_CHECKS = {
    "name": _batch_name,
    "pool": get_pool,
    "flow": _batch_flow,
    "policy": lambda value: get_policy(name_of(value, field="policy", what=gettext_lazy("a retry policy"))
                                       if not isinstance(value, models.Model) else value),
    "payload": parse_payload,
    "tasks_per_tick": lambda value: _count(value, field="tasks_per_tick", minimum=1),
    "recent_window_seconds": lambda value: _count(value, field="recent_window_seconds", minimum=0),
    "retryable_error_patterns": _batch_patterns,
}


def _batch_values(data: dict) -> dict:
    unknown = sorted(map(str, set(data) - set(BATCH_FIELDS)))
    if unknown:
        raise BadInput(_("not a field an operator sets on a batch config: %(fields)s") % {
            "fields": ", ".join(unknown)}, field=unknown[0])
    return {field: _BATCH_CHECKS[field](value) if field in _BATCH_CHECKS else value for field, value in data.items()}


def _shown(value):
    # A pool or policy by its name: what an operator reads in the audit log.
    return str(value) if isinstance(value, models.Model) else value


def save_batch_config(*, data: dict, actor: str, config: BatchConfig | int | None = None) -> BatchConfig:
    """Create a batch config (`config` None: name, pool, flow and policy are required) or change
    the fields of `data` on one, under its row lock and writing only what differs, so a tick
    landing meanwhile keeps its last_tick_at. Records BATCH_CREATE or BATCH_CHANGE with the
    fields before and after; a save that changes nothing records nothing."""
    actor = name_of(actor, field="actor", what=gettext_lazy("who saves the batch config"))
    values = _batch_values(data)
    try:
        with transaction.atomic():
            if config is None:
                missing = [field for field in ("name", "pool", "flow", "policy") if field not in values]
                if missing:
                    raise BadInput(_("a new batch config needs %(fields)s") % {"fields": ", ".join(missing)},
                                   field=missing[0])
                saved = BatchConfig.objects.create(**values)
                record_audit(action=AuditAction.BATCH_CREATE, target=saved, before=None, actor=actor,
                             after={field: _shown(getattr(saved, field)) for field in BATCH_FIELDS})
                return saved
            config_id = config.pk if isinstance(config, BatchConfig) else record_id(config, field="config",
                                                                                     error=BadInput)
            saved = BatchConfig.objects.select_for_update(of=("self",)).select_related("pool", "policy").filter(
                pk=config_id).first()
            if saved is None:
                raise BadInput(_("no batch config with id %(id)r") % {"id": config_id}, field="config")
            if "payload" in values:  # the console showed it masked: a mask sent back keeps the secret
                values["payload"] = keep_masked_secrets(values["payload"], saved.payload, field="payload", error=BadInput)
            edited = {field: value for field, value in values.items() if getattr(saved, field) != value}
            if not edited:
                return saved
            before = {field: _shown(getattr(saved, field)) for field in edited}
            for field, value in edited.items():
                setattr(saved, field, value)
            saved.save(update_fields=list(edited))
            record_audit(action=AuditAction.BATCH_CHANGE, target=saved, before=before, actor=actor,
                         after={field: _shown(value) for field, value in edited.items()})
            return saved
    except IntegrityError as exc:
        # The name is the table's only unique column: a unique violation is a taken name, also
        # one that a save running at the same time took first.
        if getattr(exc.__cause__, "sqlstate", None) != "23505":
            raise
        raise BadInput(_("a batch config named %(name)r exists already") % {"name": values.get("name")},
                       field="name") from None
