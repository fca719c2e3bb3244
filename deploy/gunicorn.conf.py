"""gunicorn's settings for RetryOps (deploy/Procfile, deploy/compose.yaml):
`gunicorn --config deploy/gunicorn.conf.py retryops.wsgi:application`. The process count is the
platforms' WEB_CONCURRENCY; anything else a host needs otherwise (another port, more threads) is
gunicorn's own GUNICORN_CMD_ARGS, which overrides this file. A bad value stops start-up with one
line naming the variable (retryops.env, retryops.startup). A load balancer routes by /readyz
(PostgreSQL, migrations) and restarts by /healthz."""

from retryops.env import env_int
from retryops.startup import read_settings_or_exit, refuse_bad_configuration

# The app's settings are read here, in gunicorn's master, before any worker starts: a bad one
# (DATABASE_URL=mysql://x) stops gunicorn with one line, where a worker failing to load the app
# would print its traceback and gunicorn's own lines around it.
read_settings_or_exit()
from django.conf import settings  # noqa: E402 - read once read_settings_or_exit has checked them

# gthread, a process per core (WEB_CONCURRENCY, 2 for the 2-core hosts we size for) of 2 threads:
# an API request is now mostly Python (authentication from a cache, one statement per claim), so
# a second thread only has to run while the first waits on PostgreSQL or Redis; more threads per
# process queue on the GIL, and every thread that waits for it behind a busy one adds its switch
# interval to its request (8 threads per process: 0.11 of the in-process claim pair at 4 clients,
# 2 threads: 0.22, bench/api.py on a busy 2-core machine). Not the sync worker: it closes every
# connection after one request (the API's clients keep theirs), and one slow client holds a whole
# process; gthread parks idle and slow connections in its poller, not in a thread. Each thread holds
# its own database connection (docs/deployment.md, "Database connections"). The worker answers a
# request it refuses by the limits below (414, 431) in the API's JSON error shape, not as HTML.
worker_class = "retryops.gunicorn_worker.Worker"
from retryops.gunicorn_worker import HEADER_FIELD_BYTES, HEADER_FIELDS, REQUEST_LINE_BYTES  # noqa: E402

limit_request_line = REQUEST_LINE_BYTES
limit_request_fields = HEADER_FIELDS
limit_request_field_size = HEADER_FIELD_BYTES
with refuse_bad_configuration():
    # WEB_CONCURRENCY is the name Heroku-style platforms (and gunicorn itself) use for the process count.
    workers = env_int("WEB_CONCURRENCY", 2, minimum=1, maximum=256)
threads = 2
bind = "0.0.0.0:8000"
# A request longer than this is killed with its worker; the API answers in milliseconds.
timeout = 60
# gunicorn's lines, its access line included, go through the app's formatter to standard error:
# one format from the web tier (JSON, or plain text with LOG_FORMAT=text), masked as the app masks,
# and an access line a request carrying the X-Request-ID the app answered with
# (telemetry/gunicorn_logs.py). A logconfig_dict turns the access log on; --access-logfile would
# only add gunicorn's handler, which this config then removes.
logconfig_dict = settings.LOGGING
logger_class = "telemetry.gunicorn_logs.AccessLogger"
# gunicorn 24+ opens a control socket in $HOME/.gunicorn/: two web processes on one host would
# share its path, and the image's user may not write there. Nothing here uses it.
control_socket_disable = True
