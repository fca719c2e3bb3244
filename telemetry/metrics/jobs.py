"""The metrics rollup's periodic job: thin, it calls the service and returns what it did. A
scrape is exact whatever the cadence, and costs the rows written since the last pass."""

ROLL_UP_METRICS_EVERY = 5


def roll_up_metrics_job() -> dict:
    """Periodic: one pass of the metrics rollup (telemetry.metrics.rollup.roll_up_metrics)."""
    from telemetry.metrics.rollup import roll_up_metrics

    done = roll_up_metrics()
    return {"skipped": done.skipped, "below_xid": done.to_xid, "series": done.series,
            "ms": round(done.seconds * 1000, 1)}
