"""The acceptance figures' snapshot, recomputed by a periodic job (`refresh_figures_job`, every
selectors.REFRESH_FIGURES_EVERY seconds) so that /metrics reads one row."""

from datetime import datetime

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from retryops.language import in_stored_language
from retryops.replica import from_replica
from telemetry.figures.selectors import acceptance_figures
from telemetry.figures.models import AcceptanceSnapshot


def refresh_acceptance_snapshot(*, seconds: int | None = None, now: datetime | None = None) -> AcceptanceSnapshot:
    """Compute the acceptance figures over `seconds` (RETRYOPS_FIGURES_WINDOW_SECONDS) up to `now`
    and store them as that window's snapshot, in one statement: two refreshes at once both
    succeed, the later one's figures stay."""
    seconds = seconds or settings.RETRYOPS_FIGURES_WINDOW_SECONDS
    now = now or timezone.now()
    # Seconds of aggregates over the window, which need not see the last second's rows.
    figures = {key: figure.value for key, figure in from_replica(acceptance_figures, seconds=seconds, now=now).items()}
    with transaction.atomic():
        AcceptanceSnapshot.objects.bulk_create(
            [AcceptanceSnapshot(window_seconds=seconds, computed_at=now, figures=figures)],
            update_conflicts=True, unique_fields=["window_seconds"], update_fields=["computed_at", "figures"])
    return AcceptanceSnapshot.objects.get(window_seconds=seconds)


@in_stored_language
def refresh_figures_job() -> dict:
    """Periodic: recompute the acceptance figures that /metrics exports."""
    snapshot = refresh_acceptance_snapshot()
    return {"window_seconds": snapshot.window_seconds, **snapshot.figures}
