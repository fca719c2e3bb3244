"""The acceptance figures' snapshot: what /metrics exports, so a scrape reads one row."""

from django.db import models
from django.utils.translation import gettext_lazy as _


class AcceptanceSnapshot(models.Model):
    """The acceptance figures over one window, as the periodic job last computed them
    (telemetry.figures.services.refresh_acceptance_snapshot); AcceptanceCollector exports them."""

    window_seconds = models.PositiveIntegerField(_("window (seconds)"), unique=True)
    computed_at = models.DateTimeField(_("computed at"))
    # {figure key: value or null (no data)}: telemetry.figures.selectors.GAUGES names the keys.
    figures = models.JSONField(_("figures"), default=dict)

    class Meta:
        verbose_name = _("acceptance figures snapshot")
        verbose_name_plural = _("acceptance figures snapshots")
        constraints = [
            models.CheckConstraint(condition=models.Q(window_seconds__gte=1), name="acceptance_snapshot_window_positive"),
        ]

    def __str__(self) -> str:
        return f"acceptance figures over {self.window_seconds} s at {self.computed_at.isoformat()}"
