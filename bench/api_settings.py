"""Settings of bench/api.py's server: bench/settings.py's, with the API's throttle on at rates no
client of the benchmark reaches, so that its cost is part of what is measured (every client of
the benchmark shares one key)."""

from bench.settings import *  # noqa: F403

RETRYOPS_API_READ_RATE = RETRYOPS_API_WRITE_RATE = "100000/min"
