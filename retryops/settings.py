"""RetryOps settings: everything that differs between machines comes from the environment."""

import sys
from datetime import timedelta
from pathlib import Path

import dj_database_url

from retryops import devservices
from retryops.env import (
    check_database_url,
    check_http_url,
    check_redis_url,
    env_addresses,
    env_bool,
    env_choice,
    env_header_value,
    env_int,
    env_list,
    env_networks,
    env_str,
)
from telemetry.logs import FORMATS, logging_config

BASE_DIR = Path(__file__).resolve().parent.parent

DEBUG = env_bool("DEBUG", False)
# Unset, DATABASE_URL, REDIS_URL and SECRET_KEY fall back to this machine's own servers and key
# (retryops/devservices.py), which the README's two commands rely on. Production sets this to true
# (deploy/): there a worker host missing REDIS_URL would idle on an embedded Redis of its own, and a
# web host missing SECRET_KEY would sign sessions and CSRF tokens no other host behind the balancer accepts.
RETRYOPS_REQUIRE_CONFIG = env_bool("RETRYOPS_REQUIRE_CONFIG", False)
if RETRYOPS_REQUIRE_CONFIG and (_missing := devservices.missing_configuration()):
    from django.core.exceptions import ImproperlyConfigured

    raise ImproperlyConfigured(f"RETRYOPS_REQUIRE_CONFIG is true but these are unset or empty: {', '.join(_missing)}; "
                               "set each (without RETRYOPS_REQUIRE_CONFIG they fall back to this host's own "
                               "servers and key)")
# Unset, a random key is generated once per checkout and kept in .embedded/ (never a known constant).
SECRET_KEY = env_str("SECRET_KEY") or devservices.local_secret_key()
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])
# Where operators open RetryOps: the links in Slack messages and PagerDuty incidents start with it.
RETRYOPS_PUBLIC_URL = (env_str("RETRYOPS_PUBLIC_URL", "") or "http://localhost:8000").rstrip("/")
# Production behind TLS (`manage.py check --deploy` is clean once these are set, see deploy/).
# Cookies go over https only when operators open RetryOps over https: said once, by the public
# URL. `manage.py up` and the tests serve plain http on loopback, where a secure cookie would
# never come back and a redirect to https would lead nowhere.
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = RETRYOPS_PUBLIC_URL.startswith("https://")
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", False)
# Browsers remember HSTS for this many seconds: start small (3600) and raise it to a year
# (31536000) once https is known to work for every host, subdomains included when said.
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 0, minimum=0, maximum=2 * 365 * 86_400)
# HSTS names this host only: extending it to every subdomain, or to the browsers' preload list,
# commits every host of the domain, which is its owner's decision, made at the TLS proxy.
SILENCED_SYSTEM_CHECKS = ["security.W005", "security.W021"]
# "X-Forwarded-Proto: https": the header (and value) by which the TLS-terminating proxy in front
# says a request came over https. Only behind a proxy that always sets it: a client could
# otherwise claim https itself.
SECURE_PROXY_SSL_HEADER = env_header_value("SECURE_PROXY_SSL_HEADER")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    # Before django_rq: its rqworker command is retryops' own, which refuses to start
    # against a database that lacks a migration (retryops/migrated.py).
    "retryops",
    "django_rq",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "audit",
    "resources",
    "scheduling",
    "compensation",
    "telemetry",
    # The console's sign-in throttle (retryops/login_throttle.py).
    "axes",
]

MIDDLEWARE = [
    # Notes each response's X-Request-ID for runserver's request line (`manage.py up`).
    "telemetry.middleware.AnsweredRequestId",
    # /healthz and /readyz, answered before the host check: load balancers probe by address.
    "telemetry.middleware.ProbeMiddleware",
    # A body without Content-Length (chunked) is refused (411), never read as empty.
    "retryops.middleware.RefuseUnframedBody",
    "django.middleware.security.SecurityMiddleware",
    # Serves /static/ from the app itself, also with DEBUG off (the default), so the admin is styled.
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    # The console speaks the browser's language (Accept-Language), or the one chosen in its switcher
    # (a cookie); LANGUAGE_CODE when neither names one of LANGUAGES.
    "django.middleware.locale.LocaleMiddleware",
    "django.middleware.common.CommonMiddleware",
    # ?state__exact=%00 would reach PostgreSQL from an admin list filter: 400 naming the parameter.
    "retryops.middleware.RefuseNulInQuery",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "audit.middleware.AuditContextMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Last, as django-axes asks: it turns a sign-in its backend refused as locked into the lockout page.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "retryops.urls"
WSGI_APPLICATION = "retryops.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# PostgreSQL only: DATABASE_URL, else the local server, else an embedded one (retryops/devservices.py).
# runserver (`manage.py up`) handles each request in a thread of its own, which ends with the
# request: a kept connection would stay open, idle, until garbage collection (dozens of them).
DB_CONN_MAX_AGE = 0 if sys.argv[1:2] == ["runserver"] else 60
DATABASES = {
    "default": dj_database_url.parse(
        check_database_url(devservices.database_url()),
        conn_max_age=DB_CONN_MAX_AGE,
        conn_health_checks=True,
    )
}
# A read replica (a hot standby of the primary, or a pooler in front of one) for the console's
# heaviest read-only pages: the acceptance figures, which errors are really transient, and
# `manage.py policy_whatif` (retryops/replica.py says which reads, and why no others). Unset:
# they read the primary. The tests mirror it onto the test database.
DATABASE_REPLICA_URL = env_str("DATABASE_REPLICA_URL", "") or ""
if DATABASE_REPLICA_URL:
    try:
        DATABASES["replica"] = dj_database_url.parse(
            check_database_url(DATABASE_REPLICA_URL, name="DATABASE_REPLICA_URL"), conn_max_age=DB_CONN_MAX_AGE,
            conn_health_checks=True, test_options={"MIRROR": "default"})
    except ValueError as exc:
        from django.core.exceptions import ImproperlyConfigured

        raise ImproperlyConfigured(f"DATABASE_REPLICA_URL is not a database URL: {exc}") from None
DATABASE_ROUTERS = ["retryops.replica.ReplicaRouter"]
# Those pages read the primary while the replica does not answer (each process tries it again
# after RETRY_SECONDS: a host that drops packets costs a whole DB_CONNECT_TIMEOUT a try), and while
# it is more than MAX_LAG_SECONDS behind.
RETRYOPS_REPLICA_RETRY_SECONDS = 30
RETRYOPS_REPLICA_MAX_LAG_SECONDS = 300
# Behind a transaction-mode pooler (pgbouncer) consecutive statements of one connection may
# reach different server sessions: Django's server-side cursors (`.iterator()`) and psycopg's
# prepared statements would then be looked up in a session that never had them. The replica
# is taken to be reached the same way as the primary.
DB_TRANSACTION_POOLER = env_bool("DB_TRANSACTION_POOLER", False)
# libpq waits for a connection as long as the kernel retries (about 2 minutes) when the database
# host drops packets: /readyz and every request would hang that long. A URL's own
# ?connect_timeout= (dj_database_url puts it in OPTIONS) wins.
DB_CONNECT_TIMEOUT = 10
DB_LOCK_TIMEOUT = "5s"
DB_IDLE_IN_TRANSACTION_TIMEOUT = "60s"
for _alias, _database in DATABASES.items():
    _url_name = "DATABASE_URL" if _alias == "default" else "DATABASE_REPLICA_URL"
    _database.setdefault("OPTIONS", {}).setdefault("connect_timeout", DB_CONNECT_TIMEOUT)
    if not _database["ENGINE"].endswith("postgresql"):
        from django.core.exceptions import ImproperlyConfigured

        raise ImproperlyConfigured(f"{_url_name} must point at PostgreSQL, got engine {_database['ENGINE']!r}")
    _database["DISABLE_SERVER_SIDE_CURSORS"] = DB_TRANSACTION_POOLER
    # Server-side binding lets psycopg prepare the pool's hot statements after a few runs, which
    # saves their parsing and planning on every claim (see bench/claim.py). Django turns psycopg's
    # prepared statements off unless OPTIONS names a threshold, so it is named here. A
    # transaction-mode pooler cannot keep prepared statements.
    if not DB_TRANSACTION_POOLER:
        _database.setdefault("OPTIONS", {}).update(server_side_binding=True, prepare_threshold=5)
    # PostgreSQL's JIT compiles any query the planner costs high, such as the console's count of a
    # filtered list of 100,000 resources: 50-110 ms of compiling for a 250 ms query (bench/admin.py),
    # never won back by queries that short. A pooler may refuse startup options: there, set it on the
    # role instead (ALTER ROLE app SET jit = off).
    # One stuck row stalls nothing: a statement waits at most DB_LOCK_TIMEOUT for a row lock (every
    # write here holds its locks for milliseconds; a claim by name waits for a concurrent claimer's),
    # and a session left idle inside a transaction (a paused or frozen process holding row locks) is
    # ended by the server after DB_IDLE_IN_TRANSACTION_TIMEOUT, which frees its locks. Behind a
    # transaction-mode pooler, set both on the role (ALTER ROLE app SET lock_timeout = '5s', ...).
    if not DB_TRANSACTION_POOLER:
        _options = _database.setdefault("OPTIONS", {})
        _options["options"] = (f"{_options.get('options', '')} -c jit=off -c lock_timeout={DB_LOCK_TIMEOUT} "
                               f"-c idle_in_transaction_session_timeout={DB_IDLE_IN_TRANSACTION_TIMEOUT}").strip()
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Redis Sentinel (Redis on several hosts): REDIS_SENTINELS lists the sentinels (host:port, ...)
# and REDIS_SENTINEL_MASTER the name they watch the master under. The queues, the workers, the
# cache, the streams and the probes then ask the sentinels which server is the master, and follow
# it through a failover with no setting changed; REDIS_URL is not used (database 0 is).
# REDIS_SENTINEL_MASTER_PASSWORD is the master's (and its replicas') requirepass,
# REDIS_SENTINEL_PASSWORD the sentinels' own, if they have one (both also as *_FILE).
REDIS_SENTINELS = env_addresses("REDIS_SENTINELS")
REDIS_SENTINEL = None
if REDIS_SENTINELS:
    from django.core.exceptions import ImproperlyConfigured

    from retryops.redis_servers import SentinelMaster

    if env_str("REDIS_URL"):
        raise ImproperlyConfigured("REDIS_URL and REDIS_SENTINELS are both set: set one (with REDIS_SENTINELS, "
                                   "the sentinels name the Redis server)")
    if not (env_str("REDIS_SENTINEL_MASTER") or "").strip():
        raise ImproperlyConfigured("REDIS_SENTINELS is set but REDIS_SENTINEL_MASTER is not: name the master the "
                                   "sentinels watch (their `sentinel monitor NAME ...`)")
    REDIS_SENTINEL = SentinelMaster(
        sentinels=tuple(REDIS_SENTINELS), name=env_str("REDIS_SENTINEL_MASTER").strip(),
        db=0,
        password=env_str("REDIS_SENTINEL_MASTER_PASSWORD", "") or "",
        sentinel_password=env_str("REDIS_SENTINEL_PASSWORD", "") or "")
    REDIS_URL = ""
    REDIS_CONNECTION = REDIS_SENTINEL.rq_connection()
else:
    for _name in ("REDIS_SENTINEL_MASTER", "REDIS_SENTINEL_MASTER_PASSWORD", "REDIS_SENTINEL_PASSWORD"):
        if env_str(_name):
            from django.core.exceptions import ImproperlyConfigured

            raise ImproperlyConfigured(f"{_name} is set but REDIS_SENTINELS is not: list the sentinels "
                                       "(host:port, ...), or put the Redis server in REDIS_URL instead")
    REDIS_URL = check_redis_url(devservices.redis_url())
    REDIS_CONNECTION = {"URL": REDIS_URL}
RQ_QUEUES = {
    name: {**REDIS_CONNECTION, "DEFAULT_TIMEOUT": 600}
    for name in ("default", "flows", "retries")
}
# Jobs are enqueued only once the transaction that wrote their rows has committed.
RQ = {"COMMIT_MODE": "on_db_commit"}
# django-rq's pages are mounted once, at /admin/rq/, behind the console's permissions (retryops/rq_dashboard.py),
# not a second time, staff-only, as an admin model.
RQ_SHOW_ADMIN_LINK = False

# Django's cache, in the app's Redis (the embedded one too, through its unix socket): the API's
# throttle counters. Short timeouts: a Redis that hangs must not hang requests (the throttle then
# lets them through, see retryops/api/throttles.py).
CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": REDIS_URL or f"sentinel:{REDIS_SENTINEL.name}",
        "KEY_PREFIX": "retryops",
        "OPTIONS": {"socket_connect_timeout": 0.5, "socket_timeout": 0.5,
                    **(REDIS_SENTINEL.cache_options() if REDIS_SENTINEL else {})},
    },
}

# Sign-in throttle (django-axes; retryops/login_throttle.py): this many wrong passwords for one
# username from one address lock that pair for the cool-off, the right password included.
AUTHENTICATION_BACKENDS = ["axes.backends.AxesStandaloneBackend", "django.contrib.auth.backends.ModelBackend"]
AXES_FAILURE_LIMIT = 5
AXES_COOLOFF_TIME = timedelta(minutes=15)
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True  # a right password (before the lock) starts the count again
AXES_CLIENT_IP_CALLABLE = "retryops.login_throttle.client_address"
AXES_LOCKOUT_CALLABLE = "retryops.login_throttle.locked_out"
# Failures only: a row per successful sign-in would be a write per session that nobody reads here.
AXES_DISABLE_ACCESS_LOG = True
# Locks are lifted with `manage.py axes_reset_username` (or axes_reset); axes' own admin pages
# would be untranslated English in a Chinese console.
AXES_ENABLE_ADMIN = False

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGES = [("en", "English"), ("zh-hans", "简体中文")]
LANGUAGE_CODE = "en"
# Each app keeps its catalogue in <app>/locale; the project's templates and retryops/ keep theirs here.
LOCALE_PATHS = [BASE_DIR / "locale"]
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
# collectstatic also writes gzip copies, which WhiteNoise serves to clients that accept them.
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
# Production runs collectstatic and is served from STATIC_ROOT; a checkout that never did
# (`manage.py up` on a newcomer's machine, the tests) is served from the apps' own static folders.
WHITENOISE_USE_FINDERS = not STATIC_ROOT.is_dir()
if WHITENOISE_USE_FINDERS:
    import re
    import warnings

    # WhiteNoise warns at every start that STATIC_ROOT is missing, which is expected here.
    warnings.filterwarnings("ignore", message=re.escape(f"No directory at: {STATIC_ROOT}"))

# json: one JSON object a line, with the request, task, attempt and resource bound where known
# (telemetry/logs.py); text: the same as plain lines, for a developer's terminal.
LOG_FORMAT = env_choice("LOG_FORMAT", "json", FORMATS)
LOGGING = logging_config(log_format=LOG_FORMAT, level="INFO")


# Flows: name -> dotted path of a callable(FlowContext). Add your own here or with @flow.
RETRYOPS_FLOWS = {
    "http_call": "scheduling.flows.http_call.http_call",
    "demo": "scheduling.flows.demo.demo",
    "noop": "scheduling.flows.demo.noop",
}
RETRYOPS_POLICY_FILE = BASE_DIR / "config" / "tasks" / "retry-policies.yaml"
RETRYOPS_HTTP_CALL_URL = env_str("RETRYOPS_HTTP_CALL_URL", "")
RETRYOPS_HTTP_CALL_TIMEOUT = 10
# Empty: our forking worker (retryops.worker.Worker), which isolates each flow in a work horse of
# its own and keeps the attempt's lease from the worker process, where neither the flow's GIL nor a
# paused horse can stop it. "rq.worker.SimpleWorker" runs about five times more jobs per second by
# sharing one process between jobs, and renews leases from a thread beside the flow, which a flow
# holding the GIL or a paused process stops (see docs/concepts.md, "Workers").
RETRYOPS_WORKER_CLASS = env_str("RETRYOPS_WORKER_CLASS", "")
# Through django-rq's own setting, so every `manage.py rqworker` uses it (up's, the Procfile's and
# the compose file's), with no --worker-class on a command line that would then differ between them.
RQ["WORKER_CLASS"] = RETRYOPS_WORKER_CLASS or "retryops.worker.Worker"
# The longest lease a claim, a heartbeat or a pool may ask for (a day): past it a resource held by
# a client that forgot it would stay out of its pool however often the sweeper runs.
RETRYOPS_MAX_LEASE_SECONDS = 86_400
# The console's diagnosis of a failing resource (resources.selectors.Diagnosis): "environment" when
# the signature of its latest failure was also the latest failure of at least this many resources
# of its pool, itself included.
RETRYOPS_DIAGNOSIS_MIN_RESOURCES = 5
# Which errors are really transient (scheduling.analysis, beside each retry policy in the console):
# the window it reads by default, in days; a page may choose another, up to 90 (its MAX_WINDOW_DAYS).
RETRYOPS_TRANSIENCE_WINDOW_DAYS = 7

# The admin's dates with seconds (retryops/formats/), in English and Simplified Chinese.
FORMAT_MODULE_PATH = ["retryops.formats"]

# The SLA clocks of a work order, in seconds: dead letter -> work order (the operators' 5-minute
# notice), -> acknowledged, -> compensated.
RETRYOPS_SLA_NOTICE_SECONDS = 300
RETRYOPS_SLA_ACKNOWLEDGE_SECONDS = 900
RETRYOPS_SLA_COMPENSATE_SECONDS = 86_400

# The acceptance figures (telemetry.figures): the window the /metrics gauges and the admin panel
# measure (the figures page offers 1 h, 24 h and 7 d as well), how late past its due time a retry
# may start and still count as started within its SLA (the dispatcher runs every
# scheduling.jobs.DISPATCH_EVERY seconds, so a retry it picks up is normally that late at most).
RETRYOPS_FIGURES_WINDOW_SECONDS = 86_400
RETRYOPS_RETRY_SLA_GRACE_SECONDS = 30

# Runbooks (compensation): the folder of <name>.md runbooks, and where the example external
# action `notify_billing` POSTs its compensation requests (empty: it fails, saying so).
RETRYOPS_RUNBOOK_DIR = BASE_DIR / "config" / "runbooks"
RETRYOPS_RUNBOOK_HTTP_URL = env_str("RETRYOPS_RUNBOOK_HTTP_URL", "")
# Notifications (compensation.notifications): Slack incoming webhook and PagerDuty Events API v2.
# A channel with no URL or key records its notifications as skipped, with the reason.
RETRYOPS_SLACK_WEBHOOK_URL = env_str("RETRYOPS_SLACK_WEBHOOK_URL", "") or ""
RETRYOPS_PAGERDUTY_ROUTING_KEY = env_str("RETRYOPS_PAGERDUTY_ROUTING_KEY", "") or ""
RETRYOPS_PAGERDUTY_URL = env_str("RETRYOPS_PAGERDUTY_URL", "") or "https://events.pagerduty.com/v2/enqueue"
# Seconds for each request (connect, read, write); a timeout is retried like a 5xx.
RETRYOPS_NOTIFY_TIMEOUT = 5
# Sends per notification before it stays failed; retries wait 15 s, 30 s, 60 s, ... (at most an hour).
RETRYOPS_NOTIFY_MAX_ATTEMPTS = 6
RETRYOPS_NOTIFY_RETRY_DELAY = 15
# Escalation (compensation.services.escalation): a
# notification that failed is queued again once its last try is RETRYOPS_NOTIFY_RESEND_AFTER
# seconds old, at most RETRYOPS_NOTIFY_MAX_RESENDS times (at most 100, as a check constraint says),
# so a receiver down for hours still gets the page and a broken one is not tried forever.
RETRYOPS_NOTIFY_RESEND_AFTER = 3600
RETRYOPS_NOTIFY_MAX_RESENDS = 3
# httpx logs each request's URL at INFO, and a Slack webhook URL is a secret.
LOGGING.setdefault("loggers", {}).update({name: {"level": "WARNING"} for name in ("httpx", "httpcore")})
# django-axes' failure and lockout lines stay; its start-up banner in every process does not.
LOGGING["loggers"]["axes.apps"] = {"level": "WARNING"}
for _name in ("RETRYOPS_SLACK_WEBHOOK_URL", "RETRYOPS_PAGERDUTY_URL", "RETRYOPS_PUBLIC_URL",
              "RETRYOPS_HTTP_CALL_URL", "RETRYOPS_RUNBOOK_HTTP_URL"):
    if globals()[_name]:
        check_http_url(globals()[_name], name=_name)

# Feature flags (retryops/flags.py), all on; RETRYOPS_FLAGS_OFF lists the ones turned off, e.g.
# "task-retry-queue,audit-streaming". An unknown name stops start-up.
from retryops import flags  # noqa: E402

RETRYOPS_FLAGS_OFF = flags.parse_off(env_str(flags.ENV_VAR))
# The event stream (audit/streaming.py): each stream keeps about RETRYOPS_STREAM_MAXLEN entries.
# Empty RETRYOPS_STREAM_REDIS_URL: the streams live in the queues' Redis.
RETRYOPS_STREAM_MAXLEN = 100_000
RETRYOPS_STREAM_REDIS_URL = env_str("RETRYOPS_STREAM_REDIS_URL", "")
if RETRYOPS_STREAM_REDIS_URL:
    check_redis_url(RETRYOPS_STREAM_REDIS_URL, name="RETRYOPS_STREAM_REDIS_URL")

# Alerts (telemetry.alerts, evaluated by the ops process). An alert fires when its value goes above its threshold, and resolves
# once its value has stayed at or below threshold x RETRYOPS_ALERT_CLEAR_RATIO for
# RETRYOPS_ALERT_CLEAR_SECONDS (a retry failure rate of 15% fires; it resolves at 12% or less).
RETRYOPS_ALERT_CLEAR_RATIO = 0.8
RETRYOPS_ALERT_CLEAR_SECONDS = 120
# The share of the retries ended in the last WINDOW seconds that failed (another retry scheduled,
# or the task dead), judged once at least MIN_RETRIES of them ended: 1 failure of 2 pages nobody.
RETRYOPS_ALERT_FAILURE_RATE = 0.15
RETRYOPS_ALERT_FAILURE_WINDOW_SECONDS = 600
RETRYOPS_ALERT_FAILURE_MIN_RETRIES = 20
# Open dead letters (the dead-letter queue's length) above which the on-call is paged.
RETRYOPS_ALERT_DLQ_LENGTH = 100
# A dead task with no dead letter, or an open dead letter with no live work order, this many
# seconds after it died is a work order that was not created (the dead-letter step and escalation failed).
RETRYOPS_ALERT_WORK_ORDER_AFTER_SECONDS = 120
# A notification that failed within this many seconds (by default until escalation sends it again).
RETRYOPS_ALERT_NOTIFICATION_WINDOW_SECONDS = 3600
# The oldest row the metrics rollup has not taken in, waiting this many seconds: a transaction left
# open on the server holds the rollup's watermark back (telemetry.metrics_watermark).
RETRYOPS_ALERT_METRICS_WATERMARK_SECONDS = 900


# The REST API (retryops/api/ and each app's api/): API keys per external system (audit.ApiClient)
# or the admin's session; permissions are the admin's codenames on the key's service user.
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "retryops.api.authentication.ApiKeyAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["retryops.api.permissions.Requires"],
    "DEFAULT_THROTTLE_CLASSES": ["retryops.api.throttles.ClientRateThrottle"],
    # Who an anonymous caller is (the open schema and docs pages' limit): the address this many
    # proxies in front of the app saw, never an X-Forwarded-For the caller wrote itself.
    "NUM_PROXIES": env_int("RETRYOPS_API_NUM_PROXIES", 0, minimum=0),
    "DEFAULT_PAGINATION_CLASS": "retryops.api.pagination.CursorPage",
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["retryops.api.parsers.JSONParser"],
    "DEFAULT_SCHEMA_CLASS": "retryops.api.schema.ApiSchema",
    "EXCEPTION_HANDLER": "retryops.api.errors.exception_handler",
    # NaN and Infinity in a body are bad input, never a value a column cannot hold.
    "STRICT_JSON": True,
    # Answers in ASCII (\\u escapes): an answer that quotes a lone surrogate a client sent can
    # still be encoded.
    "UNICODE_JSON": False,
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
}
# Requests per client (an API client, else a session user, else an address), as N/s, /min,
# /hour or /day; reads (GET) and writes counted apart. Empty: not throttled.
RETRYOPS_API_READ_RATE = "6000/min"
RETRYOPS_API_WRITE_RATE = "3000/min"
RETRYOPS_API_ANON_RATE = "120/min"
RETRYOPS_API_THROTTLE_CACHE = "default"

SPECTACULAR_SETTINGS = {
    "TITLE": "RetryOps API",
    "DESCRIPTION": (
        "Claims, the atomic reset-and-retry of a resource, its retry history, tasks and dead letters, for external "
        "systems. Authenticate with `Authorization: Bearer <key>` (or `X-API-Key`). Every error is "
        '`{"error": {"code", "message", "details"}}`. Every POST takes an `Idempotency-Key`.'
    ),
    "VERSION": "1",
    "OAS_VERSION": "3.1.0",
    "SCHEMA_PATH_PREFIX": "/api/",
    "SERVE_INCLUDE_SCHEMA": False,
    "COMPONENT_SPLIT_REQUEST": True,
    # The docs page's assets come from drf-spectacular-sidecar, served from /static/ (no CDN).
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # One name for a set of choices several fields share.
    "ENUM_NAME_OVERRIDES": {
        # Every model's `state` has choices of its own.
        "ResourceStateEnum": "resources.choices.ResourceState",
        "TaskStateEnum": "scheduling.choices.TaskState",
        "DeadLetterStateEnum": "compensation.choices.DeadLetterState",
        "BulkReplayStateEnum": "compensation.choices.BulkReplayState",
        "WorkOrderStateEnum": "compensation.choices.WorkOrderState",
        "RunbookRunStateEnum": "compensation.runbooks.models.RunbookRunState",
        # A resource's last failure and a task's attempt share the categories.
        "FailureCategoryEnum": "resources.choices.FailureCategory",
    },
}

# /metrics (telemetry.metrics_access): a scrape must come from an address in RETRYOPS_METRICS_ALLOW
# (CIDRs; loopback by default; empty: any address), and, when RETRYOPS_METRICS_TOKEN (or its
# _FILE) is set, send it as "Authorization: Bearer <token>". Behind a proxy the address is the one
# RETRYOPS_API_NUM_PROXIES proxies saw, as for the API. An endpoint open to every address without
# a token is refused.
RETRYOPS_METRICS_TOKEN = env_str("RETRYOPS_METRICS_TOKEN", "") or ""
RETRYOPS_METRICS_ALLOW = env_networks("RETRYOPS_METRICS_ALLOW", "127.0.0.0/8,::1")
if RETRYOPS_METRICS_TOKEN and (len(RETRYOPS_METRICS_TOKEN) < 16 or not RETRYOPS_METRICS_TOKEN.isascii()
                               or not RETRYOPS_METRICS_TOKEN.isprintable() or " " in RETRYOPS_METRICS_TOKEN):
    from django.core.exceptions import ImproperlyConfigured

    raise ImproperlyConfigured("RETRYOPS_METRICS_TOKEN must be at least 16 printable ASCII characters without "
                               "spaces (e.g. the output of: openssl rand -hex 32)")
if not RETRYOPS_METRICS_ALLOW and not RETRYOPS_METRICS_TOKEN:
    from django.core.exceptions import ImproperlyConfigured

    raise ImproperlyConfigured("RETRYOPS_METRICS_ALLOW is empty (any address) and RETRYOPS_METRICS_TOKEN is unset: "
                               "/metrics would be open to anyone; set a token or list the addresses allowed")
