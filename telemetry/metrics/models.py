"""The metrics rollup: counts of the database's rows per metric series, up to a transaction watermark."""

from django.db import models
from django.db.models import Q
from django.utils.translation import gettext_lazy as _

from scheduling.models import TransactionIdField


class MetricRollup(models.Model):
    """How many rows (events, finished attempts, dead letters) one metric series counted below the
    watermark, and the sum of their observed values: a counter's value, or one histogram bucket's
    share (the rows whose value is at most `le` and above the bucket before it). Written only by
    telemetry.metrics.rollup.roll_up_metrics."""

    metric = models.CharField(_("metric"), max_length=60)
    flow = models.CharField(_("flow"), max_length=100)
    # An id, not a foreign key: the counts outlive a pool, and the scrape names it when it exists.
    pool_id = models.BigIntegerField(_("pool id"))
    # The series' third label: an error category ("none" without one) or an attempt's outcome.
    label = models.CharField(_("label"), max_length=40)
    # A histogram bucket's upper bound in seconds; infinity for a counter and the +Inf bucket.
    le = models.FloatField(_("bucket upper bound"))
    count = models.BigIntegerField(_("count"), default=0)
    total = models.FloatField(_("sum of values"), default=0.0)

    class Meta:
        verbose_name = _("metric rollup")
        verbose_name_plural = _("metric rollups")
        constraints = [
            # The rollup adds to a series' row (INSERT ... ON CONFLICT on this).
            models.UniqueConstraint(fields=["metric", "flow", "pool_id", "label", "le"], name="metric_rollup_series_once"),
            models.CheckConstraint(condition=Q(count__gte=0), name="metric_rollup_count_not_negative"),
        ]

    def __str__(self) -> str:
        return f"{self.metric}{{flow={self.flow}, pool={self.pool_id}, label={self.label}, le={self.le}}} = {self.count}"


class MetricWatermark(models.Model):
    """Where the rollup stands: every row written by a transaction below `below_xid` is counted in
    MetricRollup, every row at or above it is not. One row (id 1), moved only forward, in the
    transaction that adds the counts."""

    below_xid = TransactionIdField(_("below transaction"))
    advanced_at = models.DateTimeField(_("advanced at"), auto_now=True)

    class Meta:
        verbose_name = _("metric watermark")
        verbose_name_plural = _("metric watermarks")
        constraints = [
            models.CheckConstraint(condition=Q(id=1), name="metric_watermark_single_row"),
        ]

    def __str__(self) -> str:
        return f"metrics rolled up below transaction {self.below_xid}"


class MetricGauge(models.Model):
    """One sample of a gauge whose query grows with the rows it groups (resources by pool and
    state, waiting tasks, running attempts, open dead letters): counted by each rollup pass,
    every 5 seconds by the ops process, and replaced whole, so a scrape reads a few
    dozen rows instead of grouping 100,000 resources."""

    metric = models.CharField(_("metric"), max_length=60)
    labels = models.JSONField(_("labels"), default=dict)
    value = models.FloatField(_("value"))

    class Meta:
        verbose_name = _("metric gauge")
        verbose_name_plural = _("metric gauges")

    def __str__(self) -> str:
        return f"{self.metric}{self.labels} = {self.value}"
