"""The pool's reads, shared by the services, the console, the API and telemetry. Nothing here writes.

The describe_* functions read the world as it is now and build the error that explains it; a
caller that wrote first must remember that the world may have changed since (see claim_by_id)."""

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone

from django.conf import settings
from django.core.paginator import Page, Paginator
from django.db import connection
from django.db.models import (
    Case,
    CharField,
    Count,
    Exists,
    F,
    Manager,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Value,
    When,
)
from django.db.models.expressions import RawSQL
from django.db.models.functions import Coalesce
from django.db.models.lookups import GreaterThanOrEqual
from django.utils import timezone
from django.utils.translation import gettext, ngettext, pgettext

from resources.choices import Diagnosis, EventKind, FailureCategory, ResourceState
from resources.errors import LeaseMismatch, PoolExhausted, ResourceNotFound, ResourceUnavailable
from resources.models import Resource, ResourceEvent, ResourcePool
from retryops import inputs
from retryops.jsonsafe import check_text
from retryops.errors import BadInput, NotFound


def record_id(value, *, field: str) -> int:
    """`value` as a primary key, else BadInput naming `field` (retryops.inputs.record_id)."""
    return inputs.record_id(value, field=field, error=BadInput)


def lookup_text(value, *, field: str) -> str:
    # A name looked up, not stored, still goes to PostgreSQL: a NUL or a lone surrogate in it
    # fails the query (psycopg refuses to send it) instead of finding nothing.
    problem = check_text(value)
    if problem:
        raise BadInput(gettext("%(field)s %(problem)s: %(value)s") % {
            "field": field, "problem": problem, "value": repr(value)}, field=field)
    return value


def when(moment: datetime | None) -> str:
    """A moment as an operator reads it: the time alone today, the date too otherwise."""
    if moment is None:
        return gettext("an unknown time")
    local = timezone.localtime(moment)
    if local.date() == timezone.localdate():
        return f"{local:%H:%M:%S} {local.tzname()}"
    return f"{local:%Y-%m-%d %H:%M:%S} {local.tzname()}"


def get_pool(pool: ResourcePool | int | str) -> ResourcePool:
    """The pool itself, from an instance, a primary key or a name."""
    if isinstance(pool, ResourcePool):
        return pool
    if isinstance(pool, str):
        lookup = {"name": lookup_text(pool, field="pool")}
    else:
        lookup = {"pk": record_id(pool, field="pool")}
    try:
        return ResourcePool.objects.get(**lookup)
    except ResourcePool.DoesNotExist:
        raise NotFound(gettext("no resource pool %(pool)s") % {"pool": repr(pool)}, code="pool_not_found",
                       pool=pool) from None


def pool_id_of(pool: ResourcePool | int | str) -> int:
    """A pool's id without reading the pool when given one: an unknown id simply matches nothing."""
    if isinstance(pool, ResourcePool):
        return pool.pk
    return get_pool(pool).pk if isinstance(pool, str) else record_id(pool, field="pool")


# A resource's version, which the API's ETag carries: the ids of the transactions that last wrote
# its row and its pool's row (PostgreSQL's xmin). It moves on with every write of anything the API
# shows of the resource (its state, lease, counts, label, attributes, its pool's name), costs the
# writes nothing, and stays as it is under a row lock (SELECT ... FOR UPDATE does not write the row).
_VERSION = RawSQL(f'"{Resource._meta.db_table}".xmin::text || \'.\' || '
                  f'(SELECT p.xmin::text FROM "{ResourcePool._meta.db_table}" p '
                  f'WHERE p.id = "{Resource._meta.db_table}".pool_id)', (), output_field=CharField())


def resource_version(resource_id: int) -> str:
    """The version of the resource as it is now (in a transaction that wrote it: as it commits)."""
    return Resource.objects.filter(pk=resource_id).annotate(version=_VERSION).values_list("version", flat=True).get()


def get_resource(*, resource_id: int | None = None, pool: ResourcePool | int | str | None = None,
                 key: str | None = None, with_version: bool = False) -> Resource:
    """A resource by primary key, or by pool and key, with its pool loaded, and with `version`
    (read with the row, in one statement) if asked."""
    queryset = Resource.objects.select_related("pool")
    if with_version:
        queryset = queryset.annotate(version=_VERSION)
    if resource_id is not None:
        try:
            return queryset.get(pk=record_id(resource_id, field="resource_id"))
        except Resource.DoesNotExist:
            raise no_such_resource(resource_id) from None
    if pool is None or key is None:
        raise BadInput(gettext("name a resource by resource_id, or by pool and key"), field="resource_id")
    pool = get_pool(pool)
    if not isinstance(key, str):
        raise BadInput(gettext("%(field)s must be text, got %(type)s") % {
            "field": "key", "type": type(key).__name__}, field="key")
    try:
        return queryset.get(pool=pool, key=lookup_text(key, field="key"))
    except Resource.DoesNotExist:
        raise ResourceNotFound(gettext("pool %(pool)s has no %(noun)s with key %(key)s") % {
            "pool": pool.name, "noun": pool.resource_noun, "key": repr(key)}, pool=pool.name, key=key) from None


def no_such_resource(resource_id) -> ResourceNotFound:
    return ResourceNotFound(gettext("no resource with id %(id)s") % {"id": resource_id}, resource_id=resource_id)


def not_a_uuid_sentence(lease_token) -> str:
    return gettext("lease token %(token)s is not a UUID") % {"token": repr(lease_token)}


def listing(items: list[str], *, last_joined_by: str = "and") -> str:
    """Words as a sentence lists them in the current language: "a, b or c" ("a、b或c")."""
    if len(items) < 2:
        return "".join(items)
    head = pgettext("list separator", ", ").join(items[:-1])
    if last_joined_by == "or":
        return gettext("%(items)s or %(last)s") % {"items": head, "last": items[-1]}
    return gettext("%(items)s and %(last)s") % {"items": head, "last": items[-1]}


def describe_unavailability(resource: Resource) -> ResourceUnavailable:
    """Why a named resource cannot be claimed, in an operator's words. A resource that is claimable
    again (available, failed) was taken and freed while a claim ran: that is reported as in use,
    which a retry gets past, never as a reason to give up."""
    words = {"noun": resource.pool.resource_noun, "key": resource.key}
    state = resource.state
    facts = {}
    if state == ResourceState.IN_USE and resource.leased_until <= timezone.now():
        # Its holder stopped heartbeating: "in use until" a time already past would read as a bug.
        message = gettext("%(noun)s %(key)s is still held by %(holder)s, whose lease ran out at %(until)s; "
                          "the next lease sweep frees it") % {
            **words, "holder": resource.lease_holder, "until": when(resource.leased_until)}
        reason = "in_use"
        facts = {"holder": resource.lease_holder, "until": _iso(resource.leased_until)}
    elif state == ResourceState.IN_USE:
        message = gettext("%(noun)s %(key)s is in use by %(holder)s until %(until)s") % {
            **words, "holder": resource.lease_holder, "until": when(resource.leased_until)}
        reason = "in_use"
        facts = {"holder": resource.lease_holder, "until": _iso(resource.leased_until)}
    elif state == ResourceState.QUARANTINED:
        message = gettext("%(noun)s %(key)s is quarantined since %(since)s: %(reason)s") % {
            **words, "since": when(resource.quarantined_at), "reason": resource.quarantine_reason}
        reason, facts = "quarantined", {"since": _iso(resource.quarantined_at)}
    elif state == ResourceState.DONE:
        message = gettext("%(noun)s %(key)s was consumed by a successful run at %(at)s and is done") % {
            **words, "at": when(resource.last_success_at)}
        reason, facts = "done", {"since": _iso(resource.last_success_at)}
    else:
        message = gettext("%(noun)s %(key)s was taken and freed again while this claim ran; try again") % words
        reason = "in_use"
    return ResourceUnavailable(message, reason=reason, resource_id=resource.pk, **facts)


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment is not None else None


def pool_state_counts(*, pool: ResourcePool | int | str | None = None) -> dict[int, dict[str, int]]:
    """How many resources each pool (or the one named) has in each state: {pool_id: {state: n}};
    states without resources are left out."""
    queryset = Resource.objects.all()
    if pool is not None:
        queryset = queryset.filter(pool=get_pool(pool))
    counts: dict[int, dict[str, int]] = {}
    for pool_id, state, n in queryset.values_list("pool_id", "state").annotate(n=Count("id")).order_by():
        counts.setdefault(pool_id, {})[state] = n
    return counts


def describe_exhaustion(pool_id: int) -> PoolExhausted | NotFound:
    """Why claim_next found nothing in the pool: what its resources are doing, or that it does not exist."""
    try:
        pool = ResourcePool.objects.get(pk=pool_id)
    except ResourcePool.DoesNotExist:
        return NotFound(gettext("no resource pool with id %(id)s") % {"id": pool_id}, code="pool_not_found", pool=pool_id)
    counts = pool_state_counts(pool=pool).get(pool.pk, {})
    words = {"pool": pool.name, "noun": pool.resource_noun}
    if not counts:
        return PoolExhausted(gettext("pool %(pool)s has no %(noun)ss at all") % words, pool=pool.name, counts={})
    busy = pgettext("list separator", ", ").join(
        gettext("%(count)d %(state)s") % {"count": n, "state": ResourceState(state).label.lower()}
        for state, n in sorted(counts.items()))
    return PoolExhausted(gettext("pool %(pool)s has no available %(noun)s: %(busy)s") % {**words, "busy": busy},
                         pool=pool.name, counts=counts)


def describe_lease_mismatch(resource_id: int, lease_token: uuid.UUID | str) -> LeaseMismatch | ResourceNotFound:
    """Why a lease token does not hold the resource: it expired and was swept, was released, or
    was never granted; and what the resource is doing now."""
    try:
        resource = get_resource(resource_id=resource_id)
    except ResourceNotFound as missing:
        return missing
    try:
        token = lease_token if isinstance(lease_token, uuid.UUID) else uuid.UUID(str(lease_token))
    except ValueError:
        token = None
    words = {"token": token, "noun": resource.pool.resource_noun, "key": resource.key}
    events = ResourceEvent.objects.filter(resource_id=resource_id, lease_token=token) if token else None
    expired = events.filter(kind=EventKind.LEASE_EXPIRED).first() if token else None
    if token is None:
        why, sentence = "never_granted", not_a_uuid_sentence(lease_token)
    elif expired is not None:
        why, sentence = "expired", gettext(
            "lease %(token)s on %(noun)s %(key)s expired and was swept back at %(at)s") % {
            **words, "at": when(expired.created_at)}
    elif events.exists():
        why, sentence = "released", gettext("lease %(token)s on %(noun)s %(key)s was already released") % words
    else:
        why, sentence = "never_granted", gettext("lease %(token)s was never granted on %(noun)s %(key)s") % words
    if resource.state == ResourceState.IN_USE:
        now = gettext("it is now held by %(holder)s") % {"holder": resource.lease_holder}
    else:
        now = gettext("it is now %(state)s") % {"state": resource.get_state_display().lower()}
    return LeaseMismatch(gettext("%(what)s; %(now)s") % {"what": sentence, "now": now}, why=why,
                         resource_id=resource_id, lease_token=str(lease_token))


def failed_since(queryset: QuerySet[Resource], since: datetime) -> QuerySet[Resource]:
    """The resources of `queryset` whose latest failure was at `since` or later
    (resource_last_failure_idx): the console's "last failure" filter and the API's failed_since."""
    return queryset.filter(last_failure_at__gte=since)


def recently_failed(*, pool: ResourcePool | int | str, since: datetime) -> QuerySet[Resource]:
    """A pool's resources whose last use failed retryably at `since` or later, newest failure first
    (resource_failed_recent_idx answers it): the failed-first scheduler's candidates. Slice it, or
    iterate it to filter by the failure's text."""
    return Resource.objects.filter(
        pool_id=pool_id_of(pool), state=ResourceState.FAILED, last_failure_category=FailureCategory.RETRYABLE,
        last_failure_at__gte=since,
    ).order_by("-last_failure_at")


def due_for_probe(*, now: datetime | None = None, limit: int = 100) -> list[Resource]:
    """Quarantined resources whose probation cooldown is over, longest due first, with their pools."""
    now = now or timezone.now()
    limit = inputs.whole_number(limit, field="limit", error=BadInput)
    return list(Resource.objects.select_related("pool").filter(
        state=ResourceState.QUARANTINED, probe_after__lte=now).order_by("probe_after")[:limit])


def newest_first_of(rows: QuerySet | Manager, *, resource_id: int) -> QuerySet:
    """One resource's rows of `rows` (events, attempts: a model with a (resource, -id) index),
    newest first, read on that index whatever share of the table the resource holds. Named as a
    range of one resource ordered by (resource_id, -id), not as `resource_id = x ORDER BY id DESC`:
    PostgreSQL drops a column an equality fixes from the order, and may then walk the primary key
    backwards, skipping every newer row of the other resources, when the resource holds
    a large share of the rows (it takes them to be spread evenly over the ids). The API benchmark's
    history page read 5,500 pages (2 ms) that way, 70,000 (32-48 ms) once its claim runs had written
    114,000 newer events of other resources; a busy resource that went quiet reads the whole table."""
    return rows.filter(resource_id__gte=resource_id, resource_id__lte=resource_id).order_by("resource_id", "-id")


def timeline_page(*, resource: Resource | int, page, per_page: int = 50) -> Page:
    """One page of a resource's timeline, newest first, in two queries whatever its length (its
    count and its rows, both on resource_event_timeline_idx). A page past the end or not a number
    gives the last or the first page, as a link an operator edited by hand deserves."""
    resource_id = resource.pk if isinstance(resource, Resource) else record_id(resource, field="resource")
    events = newest_first_of(ResourceEvent.objects, resource_id=resource_id)
    return Paginator(events, inputs.whole_number(per_page, field="per_page", error=BadInput)).get_page(page)


def estimated_row_count(model) -> int | None:
    """The planner's estimate of a table's rows (pg_class.reltuples, refreshed by VACUUM and
    ANALYZE): free, where count(*) reads every row. None when the table was never analyzed."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT reltuples::bigint FROM pg_class WHERE oid = %s::regclass", [model._meta.db_table])
        row = cursor.fetchone()
    return row[0] if row and row[0] >= 0 else None


# The console's diagnosis: is a failing resource itself bad, or is its environment?


NEVER = datetime(1970, 1, 1, tzinfo=dt_timezone.utc)
# How close to a resource's latest failure the other failures of its pool count, and how many
# failures in a row make it "resource" (settings.RETRYOPS_DIAGNOSIS_MIN_RESOURCES is the third rule).
DIAGNOSIS_WINDOW = timedelta(minutes=15)
DIAGNOSIS_MIN_FAILURES = 3


@dataclass(frozen=True)
class DiagnosisRule:
    """The thresholds of the diagnosis."""

    window: timedelta
    min_resources: int
    min_failures: int

    @classmethod
    def from_settings(cls) -> "DiagnosisRule":
        return cls(window=DIAGNOSIS_WINDOW, min_resources=settings.RETRYOPS_DIAGNOSIS_MIN_RESOURCES,
                   min_failures=DIAGNOSIS_MIN_FAILURES)

    def sentence(self) -> str:
        minutes = self.window.total_seconds() / 60
        return gettext(
            "Environment when the signature of a resource's latest failure was also the latest failure of at least "
            "%(resources)d resources of its pool (itself included) within %(minutes)s minutes of it; resource when it "
            "failed %(failures)d or more times in a row while another resource of its pool succeeded within "
            "%(minutes)s minutes before its latest failure, or since; unclear otherwise."
        ) % {"resources": self.min_resources, "failures": self.min_failures, "minutes": f"{minutes:g}"}


def _same_failure_nearby(rule: DiagnosisRule) -> QuerySet[Resource]:
    """Resources of the outer row's pool whose latest failure had its signature within the window
    around its latest failure (resource_failure_signature_idx), the outer row included."""
    at = OuterRef("last_failure_at")
    return Resource.objects.filter(
        pool_id=OuterRef("pool_id"), last_failure_signature=OuterRef("last_failure_signature"),
        last_failure_at__gte=at - rule.window, last_failure_at__lte=at + rule.window,
    ).order_by()


def _environment(rule: DiagnosisRule) -> Exists:
    # EXISTS (... OFFSET n-1 LIMIT 1): at least n, reading n index entries at most, however many
    # resources an outage hit.
    return Exists(_same_failure_nearby(rule)[rule.min_resources - 1:rule.min_resources])


def _pool_last_success() -> Subquery:
    """When another resource of the outer row's pool last succeeded: the first entry of
    resource_pool_success_idx read backwards (a bare EXISTS lets the planner pick a scan of the
    pool that finds nothing slowly when nobody succeeded)."""
    return Subquery(Resource.objects.filter(pool_id=OuterRef("pool_id"), last_success_at__isnull=False)
                    .exclude(pk=OuterRef("pk")).order_by("-last_success_at").values("last_success_at")[:1])


def _pool_succeeds(rule: DiagnosisRule) -> Q:
    """Another resource of the outer row's pool succeeded within the window before its latest
    failure, or since. Never NULL (a pool where nothing else succeeded compares as the epoch), so
    that its negation in filter_diagnosis holds for that pool too."""
    last_success = Coalesce(_pool_last_success(), Value(NEVER))
    return Q(GreaterThanOrEqual(last_success, F("last_failure_at") - rule.window))


def annotate_diagnosis(queryset: QuerySet[Resource], rule: DiagnosisRule | None = None) -> QuerySet[Resource]:
    """`queryset` with `diagnosis` on each row: a Diagnosis value, or "" for a resource that is not
    failing (its last use succeeded, or it never failed). Part of the rows' own query; PostgreSQL
    evaluates it only for the rows it returns, and only probes indexes for failing ones."""
    rule = rule or DiagnosisRule.from_settings()
    return queryset.annotate(diagnosis=Case(
        When(consecutive_failures=0, then=Value("")),
        When(_environment(rule), then=Value(Diagnosis.ENVIRONMENT)),
        When(Q(consecutive_failures__gte=rule.min_failures) & _pool_succeeds(rule), then=Value(Diagnosis.RESOURCE)),
        default=Value(Diagnosis.UNCLEAR), output_field=CharField(),
    ))


def filter_diagnosis(queryset: QuerySet[Resource], diagnosis: str, rule: DiagnosisRule | None = None,
                     ) -> QuerySet[Resource]:
    """The resources of `queryset` with that diagnosis, as plain conditions (not a comparison with
    the annotation), so PostgreSQL skips the resources that are not failing before any probe."""
    rule = rule or DiagnosisRule.from_settings()
    environment, succeeds = _environment(rule), _pool_succeeds(rule)
    failing = queryset.filter(consecutive_failures__gt=0)
    if diagnosis == Diagnosis.ENVIRONMENT:
        return failing.filter(environment)
    if diagnosis == Diagnosis.RESOURCE:
        return failing.filter(~environment, succeeds, consecutive_failures__gte=rule.min_failures)
    if diagnosis == Diagnosis.UNCLEAR:
        return failing.filter(~environment).filter(Q(consecutive_failures__lt=rule.min_failures) | ~succeeds)
    raise BadInput(gettext("%(field)s must be one of %(values)s, got %(value)s") % {
        "field": "diagnosis", "values": ", ".join(Diagnosis.values), "value": repr(diagnosis)}, field="diagnosis")


@dataclass(frozen=True)
class DiagnosisReport:
    """One resource's diagnosis with the figures behind it, for its page."""

    diagnosis: str
    signature: str
    same_failure_resources: int
    pool_succeeded_at: datetime | None
    rule: DiagnosisRule

    @property
    def label(self) -> str:
        return Diagnosis(self.diagnosis).label if self.diagnosis else ""

    def explanation(self) -> str:
        """Why, in a sentence, with this resource's figures."""
        figures = {"n": self.same_failure_resources, "signature": self.signature, "failures": self.rule.min_failures,
                   "minutes": f"{self.rule.window.total_seconds() / 60:g}",
                   "success": when(self.pool_succeeded_at) if self.pool_succeeded_at else ""}
        if self.diagnosis == "":
            return gettext("Not failing: its last use succeeded, or it never failed.")
        n = self.same_failure_resources
        if self.diagnosis == Diagnosis.ENVIRONMENT:
            return ngettext(
                "%(n)d resource of its pool failed last with “%(signature)s” within %(minutes)s minutes of its "
                "latest failure: the upstream or the network is the likelier cause.",
                "%(n)d resources of its pool failed last with “%(signature)s” within %(minutes)s minutes of its "
                "latest failure: the upstream or the network is the likelier cause.", n) % figures
        if self.diagnosis == Diagnosis.RESOURCE:
            return gettext("It keeps failing while another resource of its pool succeeded at %(success)s: the "
                           "resource itself is the likelier cause.") % figures
        return ngettext(
            "Unclear: %(n)d resource of its pool failed last with its signature within %(minutes)s minutes, too few "
            "for the environment, and it has not failed %(failures)d times in a row while the rest of its pool "
            "succeeded.",
            "Unclear: %(n)d resources of its pool failed last with its signature within %(minutes)s minutes, too "
            "few for the environment, and it has not failed %(failures)d times in a row while the rest of its pool "
            "succeeded.", n) % figures


def diagnosis_report(resource: Resource | int, rule: DiagnosisRule | None = None) -> DiagnosisReport:
    """A resource's diagnosis and the figures behind it (how many resources share its failure, when
    its pool last succeeded without it), in one query."""
    rule = rule or DiagnosisRule.from_settings()
    resource_id = resource.pk if isinstance(resource, Resource) else record_id(resource, field="resource")
    nearby = _same_failure_nearby(rule).values("pool_id").annotate(n=Count("*")).values("n")
    row = (annotate_diagnosis(Resource.objects.filter(pk=resource_id), rule)
           .annotate(same=Subquery(nearby), succeeded=_pool_last_success())
           .values("diagnosis", "last_failure_signature", "same", "succeeded").first())
    if row is None:
        raise no_such_resource(resource_id)
    return DiagnosisReport(diagnosis=row["diagnosis"], signature=row["last_failure_signature"] or "",
                           same_failure_resources=row["same"] or 0, pool_succeeded_at=row["succeeded"], rule=rule)
