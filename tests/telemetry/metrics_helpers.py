"""Reading /metrics as Prometheus would: the samples of one scrape, and sums over their labels."""

from django.test import Client
from prometheus_client.parser import text_string_to_metric_families


def scrape(client: Client | None = None, **headers) -> dict[tuple[str, tuple], float]:
    """One scrape of /metrics (from 127.0.0.1, the test client's address): {(sample name, sorted
    labels): value}."""
    response = (client or Client()).get("/metrics", **headers)
    assert response.status_code == 200, response.content
    return samples(response.content.decode())


def samples(text: str) -> dict[tuple[str, tuple], float]:
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def value(scraped: dict, name: str, **labels) -> float:
    """The sum of the samples named `name` whose labels include `labels` (0 when there is none)."""
    wanted = set(labels.items())
    return sum(v for (sample, have), v in scraped.items() if sample == name and wanted <= set(have))


def counters(scraped: dict) -> dict:
    """The counter and histogram samples only (the gauges move with time and rows' states)."""
    return {key: v for key, v in scraped.items() if key[0].startswith(("task_", "dead_letter_"))}
