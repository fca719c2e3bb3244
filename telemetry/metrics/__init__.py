"""/metrics: its registry, the counters rolled up below a watermark (rollup, watermark), the gauges,
and who may scrape it (access)."""
