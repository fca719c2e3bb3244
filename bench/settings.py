"""Settings of the processes the benchmarks start: the app's, without the API's throttle (a
benchmark's clients share one API key: the throttle must not be what is measured), and with the
soak's upstream timeout (bench/soak.py's HTTP_CALL_TIMEOUT)."""

from retryops.settings import *  # noqa: F403

RETRYOPS_API_READ_RATE = RETRYOPS_API_WRITE_RATE = ""
RETRYOPS_HTTP_CALL_TIMEOUT = 2
