"""The resource pool: pools, their resources, and each resource's append-only timeline."""

from django.db import models
from django.db.models import F, Q
from django.db.models.functions import Now
from django.utils.translation import gettext_lazy as _

from resources.choices import EventKind, FailureCategory, LeaseKind, ResourceState
from resources.signatures import MAX_LENGTH as SIGNATURE_LENGTH
from resources.signatures import signature_sql


class ResourcePool(models.Model):
    """A named set of interchangeable resources (accounts, phone numbers, API keys, coupons)."""

    name = models.SlugField(_("name"), max_length=100, unique=True)
    description = models.TextField(_("description"), blank=True)
    resource_noun = models.CharField(
        _("resource noun"), max_length=40, default="resource",
        help_text=_("What one resource is called in messages: account, number, key."),
    )
    lease_seconds = models.PositiveIntegerField(
        _("lease seconds"), default=300, help_text=_("How long a claim lasts without a heartbeat."))
    consume_on_success = models.BooleanField(
        _("consume on success"), default=False,
        help_text=_("A resource used successfully is consumed (done) instead of going back to the pool."),
    )
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)

    class Meta:
        verbose_name = _("resource pool")
        verbose_name_plural = _("resource pools")
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(condition=Q(lease_seconds__gt=0), name="pool_lease_seconds_positive"),
        ]

    def __str__(self) -> str:
        return self.name


class Resource(models.Model):
    """One resource of a pool, with its current lease and the failure statistics operators judge it by."""

    # No index of its own: resource_key_unique_in_pool starts with pool_id. Every claim and release
    # rewrites the row's index entries (the state sits in partial-index conditions), so each index
    # here costs on the hot path.
    pool = models.ForeignKey(ResourcePool, on_delete=models.PROTECT, related_name="resources", db_index=False,
                             verbose_name=_("pool"))
    key = models.CharField(_("key"), max_length=200,
                           help_text=_("The identifier an operator types, unique within its pool."))
    label = models.CharField(_("label"), max_length=200, blank=True)
    attributes = models.JSONField(_("attributes"), default=dict, blank=True,
                                  help_text=_("Non-secret attributes handed to flows."))
    state = models.CharField(_("state"), max_length=20, choices=ResourceState.choices,
                             default=ResourceState.AVAILABLE)

    lease_token = models.UUIDField(_("lease token"), null=True, blank=True)
    lease_holder = models.CharField(_("lease holder"), max_length=200, blank=True)
    leased_at = models.DateTimeField(_("leased at"), null=True, blank=True)
    leased_until = models.DateTimeField(_("leased until"), null=True, blank=True)
    # Whether the lease is being used: only a used lease counts a failure when it is swept back.
    lease_kind = models.CharField(_("lease kind"), max_length=20, choices=LeaseKind.choices, blank=True)
    # The fencing token: one more at every grant of this resource, never less. A holder hands it
    # to its side effects, so a receiver can refuse a holder whose lease was handed on meanwhile.
    fencing_token = models.BigIntegerField(_("fencing token"), default=0, editable=False)
    # When the lease sweeper first saw this lease lapsed (PostgreSQL's clock): it takes the lease
    # only a heartbeat interval later, so a holder back from a database outage can renew first.
    lapse_seen_at = models.DateTimeField(_("lapse seen at"), null=True, blank=True, editable=False)

    failure_count = models.PositiveIntegerField(_("failure count"), default=0)
    success_count = models.PositiveIntegerField(_("success count"), default=0)
    consecutive_failures = models.PositiveIntegerField(_("consecutive failures"), default=0)
    last_failure_reason = models.TextField(_("last failure reason"), blank=True)
    last_failure_category = models.CharField(_("last failure category"), max_length=20,
                                             choices=FailureCategory.choices, blank=True)
    last_failure_at = models.DateTimeField(_("last failure at"), null=True, blank=True)
    # Computed by PostgreSQL from the reason with the rules scheduling signs attempts with, when
    # (and only when) a failure writes the reason: the console groups and filters by it, which a
    # regex per row at read time (about 15 us each) would make cost seconds on a big pool.
    last_failure_signature = models.GeneratedField(
        verbose_name=_("last failure signature"), expression=signature_sql(models.F("last_failure_reason")),
        output_field=models.CharField(max_length=SIGNATURE_LENGTH), db_persist=True,
    )
    last_success_at = models.DateTimeField(_("last success at"), null=True, blank=True)
    quarantine_reason = models.TextField(_("quarantine reason"), blank=True)
    quarantined_at = models.DateTimeField(_("quarantined at"), null=True, blank=True)
    # Probation: a quarantine for a temporary reason gets one probe task after a cooldown;
    # a failed probe doubles the cooldown. Empty probe_after: no probe (a permanent reason).
    probe_after = models.DateTimeField(_("probe after"), null=True, blank=True)
    probation_cooldown_seconds = models.PositiveIntegerField(_("probation cooldown seconds"), default=0)

    created_at = models.DateTimeField(_("created at"), auto_now_add=True)

    class Meta:
        verbose_name = _("resource")
        verbose_name_plural = _("resources")
        ordering = ["pool_id", "id"]
        permissions = [
            ("reset_resource", "Can reset resources"),
            # External systems that run flows of their own take and give back resources (the API).
            ("claim_resource", "Can claim, release and heartbeat resources"),
            ("quarantine_resource", "Can quarantine resources and release them from quarantine"),
        ]
        constraints = [
            models.UniqueConstraint(fields=["pool", "key"], name="resource_key_unique_in_pool"),
            models.CheckConstraint(
                condition=Q(state__in=ResourceState.values), name="resource_state_valid"
            ),
            # A lease exists exactly while the resource is in use: nobody holds a free resource.
            models.CheckConstraint(
                condition=(
                    Q(
                        state=ResourceState.IN_USE,
                        lease_token__isnull=False,
                        leased_at__isnull=False,
                        leased_until__isnull=False,
                    )
                    & ~Q(lease_holder="")
                )
                | (
                    ~Q(state=ResourceState.IN_USE)
                    & Q(lease_token__isnull=True, leased_at__isnull=True, leased_until__isnull=True, lease_holder="")
                ),
                name="resource_lease_iff_in_use",
            ),
            models.CheckConstraint(
                condition=Q(state=ResourceState.IN_USE, lease_kind__in=LeaseKind.values)
                | (~Q(state=ResourceState.IN_USE) & Q(lease_kind="")),
                name="resource_lease_kind_iff_in_use",
            ),
            models.CheckConstraint(
                condition=~Q(state=ResourceState.QUARANTINED) | (~Q(quarantine_reason="") & Q(quarantined_at__isnull=False)),
                name="resource_quarantine_has_reason",
            ),
            models.CheckConstraint(
                condition=Q(probe_after__isnull=True) | Q(state=ResourceState.QUARANTINED),
                name="resource_probe_only_in_quarantine",
            ),
            models.CheckConstraint(
                condition=Q(consecutive_failures__lte=models.F("failure_count")),
                name="resource_consecutive_within_total",
            ),
            models.CheckConstraint(
                condition=Q(last_failure_category__in=["", *FailureCategory.values]),
                name="resource_failure_category_valid",
            ),
        ]
        indexes = [
            # claim_next: the next available id of a pool. The only index the claim/release
            # hot path has to maintain besides the primary key and the (pool, key) unique one.
            models.Index(
                fields=["pool", "id"], condition=Q(state=ResourceState.AVAILABLE), name="resource_available_idx"
            ),
            # The failed-first scheduler: a pool's recently failed resources. Only rows entering
            # the failed state write to it.
            models.Index(
                fields=["pool", "-last_failure_at"], condition=Q(state=ResourceState.FAILED), name="resource_failed_recent_idx"
            ),
            # The diagnosis (resources.selectors): how many of a pool's resources failed last with
            # a signature around a moment. Probed with LIMIT, once per failing row of a page.
            models.Index(
                fields=["pool", "last_failure_signature", "last_failure_at"],
                condition=Q(last_failure_at__isnull=False), name="resource_failure_signature_idx",
            ),
            # The console's list: newest failure first (never-failed last) and "failed in the last
            # hour / day"; the same index read backwards sorts oldest first (never-failed first).
            models.Index(F("last_failure_at").desc(nulls_last=True), name="resource_last_failure_idx"),
            # The console's diagnosis filters: failing resources, newest failure first, without
            # stepping over the many that failed once and have succeeded since.
            models.Index(F("last_failure_at").desc(nulls_last=True), condition=Q(consecutive_failures__gt=0),
                         name="resource_failing_recent_idx"),
            # The console's list sorted by failure count.
            models.Index(fields=["failure_count"], name="resource_failure_count_idx"),
            # The diagnosis: did another resource of the pool succeed since a moment.
            models.Index(
                fields=["pool", "last_success_at"], condition=Q(last_success_at__isnull=False),
                name="resource_pool_success_idx",
            ),
            # The resources in use, a few against the pool: the invariant checker's lease_holders
            # (every minute) and the lease sweeper. An entry per claim; nothing a heartbeat writes
            # (leased_until) is indexed, so heartbeats stay HOT updates.
            models.Index(fields=["id"], condition=Q(state=ResourceState.IN_USE), name="resource_in_use_idx"),
        ]

    def __str__(self) -> str:
        return self.key


class ResourceEvent(models.Model):
    """One thing that happened to a resource. Rows are only ever appended."""

    # No index of its own: resource_event_timeline_idx starts with resource_id.
    resource = models.ForeignKey(Resource, on_delete=models.PROTECT, related_name="events", db_index=False,
                                 verbose_name=_("resource"))
    kind = models.CharField(_("kind"), max_length=30, choices=EventKind.choices)
    actor = models.CharField(_("actor"), max_length=200, blank=True,
                             help_text=_("Who or what did it: a user, a task, a sweeper."))
    reason = models.TextField(_("reason"), blank=True)
    category = models.CharField(_("category"), max_length=20, choices=FailureCategory.choices, blank=True)
    lease_token = models.UUIDField(_("lease token"), null=True, blank=True)
    details = models.JSONField(_("details"), default=dict, blank=True)
    # PostgreSQL's clock at the inserting statement, as resources.sql's events and attempts' starts
    # are timed: the host's clock (auto_now_add) put a reset after the claim made after it.
    created_at = models.DateTimeField(_("created at"), db_default=Now())

    class Meta:
        verbose_name = _("resource event")
        verbose_name_plural = _("resource events")
        ordering = ["resource_id", "id"]
        indexes = [
            # The resource's timeline, newest first, in the admin and the API.
            models.Index(fields=["resource", "-id"], name="resource_event_timeline_idx"),
        ]

    def __str__(self) -> str:
        # Ids, not the resource's key: the key would cost a query per row wherever events are listed.
        return f"{self.kind} of resource {self.resource_id}" + (f" by {self.actor}" if self.actor else "")
