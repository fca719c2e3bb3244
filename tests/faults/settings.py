"""Settings of the processes the fault suite starts: the app's, plus the suite's flow, whose
upstream times out after a second so that a fault settles in seconds."""

from retryops.settings import *  # noqa: F403
from retryops.settings import RETRYOPS_FLOWS

RETRYOPS_FLOWS = {**RETRYOPS_FLOWS, "faults_http": "tests.faults.flow.faults_http"}
RETRYOPS_HTTP_CALL_TIMEOUT = 1
