"""The Spark session of this process: created lazily, never at import or in a prefork parent.

PySpark is not fork-safe (py4j, gRPC), so the session is made in the process that runs the
job, on first use. ``warm_up`` starts it in a background thread so that the seconds a JVM needs
to start overlap with the readers' work.

Lifecycle. A job takes its session from ``spark_job()``: a ``newSession()`` of the process
session (its own temp views, so two transforms in one worker process cannot see each
other's ``source``), or its own Spark Connect session. With ``local[*]`` the process session
stays warm for the next job. On a cluster master it is stopped when the last running job of
the process ends (``SPARK_STOP_AFTER_JOB``, on by default there): an idle Celery worker must
not hold the cluster's cores. The session is rebuilt when the Spark settings change or when
Spark stopped it (e.g. after losing its master).
"""

from __future__ import annotations

import logging
import os
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from pyspark import SparkConf, SparkContext
from pyspark.errors import PySparkRuntimeError
from pyspark.find_spark_home import _find_spark_home
from pyspark.java_gateway import launch_gateway
from pyspark.sql import SparkSession

from dataflow.jvm_class_archive import JvmClassArchive, java_executable
from dataflow.spark.deployment import (
    landing_errors,
    runs_beyond_this_process,
    stop_after_job,
)
from dataflow.spark.errors import JVM_OOM_EXIT
from dataflow.spark.jobs import JobGroup

#: The name the README and operators know these lines by.
log = logging.getLogger("dataflow.spark")

_lock = threading.Lock()
_session = None
#: JVM options of this process's driver besides Spark's (see ``warm_up_for_runflow``).
_driver_java_options = ""
#: The thread of ``warm_up``, while it starts this process's session.
_warming: threading.Thread | None = None
_session_key = None
_pid = None
_jobs_running = 0
#: Set when the JVM ran out of heap while other jobs ran in it: the last of them restarts it.
_restart_pending = False

CONNECT_TIMEOUT_S = 5.0

#: When this process reached each step of its start-up and exit (epoch seconds): ``jvm``
#: (the driver's JVM answers), ``session`` (the session is ready), and what ``runflow``
#: adds. ``runflow -v 2`` prints them; the bounded benchmark reports them.
milestones: dict[str, float] = {}


def milestone(name: str) -> None:
    """Records the first time this process reached ``name``."""
    milestones.setdefault(name, time.time())


def get_spark():
    """The process-wide SparkSession for the current settings, made on first call (thread-safe).

    A session made for other settings, or one Spark has stopped, is replaced.
    Raises ``ConnectionError`` when the cluster master or Connect server does not answer.
    """
    with _lock:
        return _current()


def application_id(session) -> str:
    """The Spark application's id as the Spark UI and logs name it ("local-...", "app-...");
    "" where the session does not say."""
    try:
        return session.conf.get("spark.app.id", "") or ""
    except Exception:  # noqa: BLE001 - only shown to users; a Connect server may not answer
        return ""


@contextmanager
def spark_job() -> Iterator:
    """A session for one job, with temp views of its own.

    When the job ends, a Connect session is released; the process session is stopped if
    ``stop_after_job()`` and no other job of this process is running.
    """
    global _jobs_running
    with _lock:
        root = None if settings.SPARK_REMOTE else _current()
        _jobs_running += 1
    try:
        if settings.SPARK_REMOTE:
            _check_can_start()
            session = _connect_builder().create()
        else:
            assert root is not None  # taken above, as there is no SPARK_REMOTE
            session = root.newSession()
            for key, value in _conf().items():
                if key.startswith("spark.sql."):
                    session.conf.set(key, value)
        try:
            yield session
        finally:
            if settings.SPARK_REMOTE:
                session.stop()
    finally:
        with _lock:
            _jobs_running -= 1
            if _jobs_running == 0 and _restart_pending:
                _drop_jvm(graceful=False)
            elif _jobs_running == 0 and stop_after_job():
                _stop_current()


def warm_up() -> threading.Thread:
    """Starts the session in the background; the returned thread ends when it is ready."""
    global _warming
    thread = threading.Thread(target=_warm_up, name="spark-warm-up", daemon=True)
    thread.start()
    _warming = thread
    return thread


def warm_up_done(timeout: float) -> bool:
    """Whether no session is being started in the background (``warm_up``) any more, after
    waiting up to ``timeout`` seconds for it: a caller that would only block on it can
    look at what it waits for in between, and give up."""
    thread = _warming
    if thread is not None:
        thread.join(timeout)
    return thread is None or not thread.is_alive()


def warm_up_for_runflow() -> threading.Thread | None:
    """``warm_up`` for ``manage.py runflow``, once its run has started (its source checked:
    a run that cannot start never waits for a JVM). None (nothing started) with Spark
    Connect.

    The driver of this one-shot process also gets ``DATAFLOW_RUNFLOW_JAVA_OPTIONS`` (by
    default C1 compilation only: on 2 cores C2's compiler threads took the CPU that the JVM's
    start, the readers and Spark's first job needed)."""
    global _driver_java_options
    if settings.SPARK_REMOTE:
        return None
    _driver_java_options = settings.DATAFLOW_RUNFLOW_JAVA_OPTIONS
    return warm_up()


def warm_up_with_job() -> threading.Thread:
    """``warm_up``, then one small job like a bounded transform's (Parquet written, read
    back, grouped, written), so that the next job finds Spark's classes loaded and its code
    compiled: for a worker that waits for Spark tasks, started as it starts. Only where
    the job runs in this process (``local`` masters); elsewhere the session alone."""
    thread = threading.Thread(target=_warm_up_with_job, name="spark-warm-up", daemon=True)
    thread.start()
    return thread


#: How many times ``warm_up_with_job`` runs its job: the JIT compiles the hot paths over
#: the first few jobs, not the first (see docs/benchmarks.md, "Bounded files").
WARM_UP_JOBS = int(os.environ.get("DATAFLOW_SPARK_WARM_UP_JOBS", "3"))


def _warm_up_with_job() -> None:
    try:
        get_spark()
        if settings.SPARK_REMOTE or runs_beyond_this_process():
            return
        started = time.perf_counter()
        settings.VAR_DIR.mkdir(parents=True, exist_ok=True)
        for _ in range(WARM_UP_JOBS):
            with (
                tempfile.TemporaryDirectory(prefix="spark-warm-up-", dir=settings.VAR_DIR) as scratch,
                spark_job() as spark,
            ):
                _warm_up_job(spark, Path(scratch))
        log.info("Spark warmed up with a job in %.1f s", time.perf_counter() - started)
    except Exception as exc:  # noqa: BLE001 - the first real job reports any failure on its run
        log.warning("Spark warm-up failed: %s", exc)


def _warm_up_job(spark, scratch: Path) -> None:
    # What a run's transform check does (an analysis over an empty view), then its job.
    spark.createDataFrame([], "id BIGINT, key STRING").createOrReplaceTempView("source")
    spark.sql("SELECT key, count(*) AS n FROM source GROUP BY key").schema.fieldNames()
    landed = str(scratch / "landed")
    spark.range(100_000).selectExpr(
        "id",
        "timestamp_seconds(id) AS ts",
        "concat('k-', id % 50) AS key",
        "cast(id % 1000 AS double) / 10 AS value",
    ).write.parquet(landed)
    spark.read.parquet(landed).createOrReplaceTempView("source")
    grouped = spark.sql("SELECT key, count(*) AS n, avg(value) AS a, max(ts) AS t FROM source GROUP BY key")
    grouped.write.parquet(str(scratch / "sink"))


def stop_spark() -> None:
    with _lock:
        _stop_current()


def _warm_up() -> None:
    try:
        get_spark()
    except Exception as exc:  # noqa: BLE001 - the job itself reports the failure on its run
        log.warning("Spark warm-up failed: %s", exc)


def _current():
    global _session, _session_key, _pid
    key = (settings.SPARK_REMOTE, settings.SPARK_MASTER, tuple(sorted(_conf().items())))
    if _session is not None and _pid != os.getpid():
        _session = None  # made by the parent before a fork: not ours to stop
    if _session is not None and (_session_key != key or _is_stopped(_session)):
        _stop_current()
    if _session is None:
        _session = _build()
        _session_key, _pid = key, os.getpid()
    return _session


def _stop_current() -> None:
    global _session
    if _session is not None and _pid == os.getpid():
        try:
            _session.stop()
        except Exception as exc:  # noqa: BLE001 - a dead session is dropped all the same
            log.warning("stopping the Spark session failed: %s", exc)
    _session = None


def _is_stopped(session) -> bool:
    if settings.SPARK_REMOTE and hasattr(session, "is_stopped"):
        return session.is_stopped
    context = getattr(session, "_sc", None)
    return context is None or context._jsc is None or context._jsc.sc().isStopped()


def _conf() -> dict[str, str]:
    conf = {
        # A transform may read only the view it is given, never a path of its choosing.
        "spark.sql.runSQLOnFiles": "false",
        # ... nor the environment: '${env:DATABASE_URL}' in a query is replaced by its value.
        "spark.sql.variable.substitute": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.sources.partitionOverwriteMode": "static",
        # A bounded transform's result is limited to one row past its row bound (``bounded_output``):
        # an ORDER BY under so large a LIMIT must sort (spilling) rather than keep a top-K
        # heap of up to that many rows in memory.
        "spark.sql.execution.topKSortFallbackThreshold": "100000",
        **settings.SPARK_CONF,
    }
    if runs_beyond_this_process() and not settings.SPARK_REMOTE:
        if settings.SPARK_CORES_MAX:
            conf["spark.cores.max"] = settings.SPARK_CORES_MAX
        if settings.SPARK_EXECUTOR_MEMORY:
            conf["spark.executor.memory"] = settings.SPARK_EXECUTOR_MEMORY
        # A cancelled task that ignores the cancel (a tight loop) ends with its executor.
        conf.setdefault("spark.task.reaper.enabled", "true")
        conf.setdefault("spark.task.reaper.killTimeout", "60s")
    if settings.SPARK_REMOTE:
        # The Connect server's own launch fixes its driver and executors; a client may set
        # only SQL options of its session.
        conf = {k: v for k, v in conf.items() if k.startswith("spark.sql.")}
    return conf


def _build():
    _check_can_start()
    if settings.SPARK_REMOTE:
        return _connect_builder().getOrCreate()
    master = settings.SPARK_MASTER
    conf = {
        "spark.app.name": "activedataflow",
        "spark.master": master,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        **_conf(),
    }
    _launch_jvm(conf, output=settings.DATAFLOW_SPARK_LOG)
    builder = SparkSession.builder
    for key, value in conf.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    milestone("session")
    log.info("Spark session on %s: application %s", master, session.sparkContext.applicationId)
    return session


def _launch_jvm(conf: dict[str, str], *, output) -> None:
    """Starts the driver's JVM (as ``getOrCreate`` would), from the class archive and with
    this process's driver options, and with its stdout and stderr on ``output`` (Spark's
    log4j lines, JVM warnings), so they do not land in a command's progress bar; ``None``
    leaves them on this process's. A JVM already running is kept."""
    with SparkContext._lock:
        if SparkContext._gateway is not None:
            return
        if output is not None:
            output.parent.mkdir(parents=True, exist_ok=True)
        archive = _class_archive(conf)
        option = archive.java_option() if archive else ""
        options = " ".join(o for o in (option, _driver_java_options) if o)
        with open(output or os.devnull, "ab") as log_file:  # the JVM keeps its own descriptor
            streams = {"stdout": log_file, "stderr": log_file} if output is not None else {}
            try:
                gateway = launch_gateway(_spark_conf(conf, options), popen_kwargs=dict(streams))
            except PySparkRuntimeError:
                if not option:
                    raise
                assert archive is not None  # the option is the archive's
                log.warning("the Spark driver did not start with %s; starting it without", option)
                archive.discard()
                gateway = launch_gateway(_spark_conf(conf, _driver_java_options), popen_kwargs=dict(streams))
                archive = None
        if archive and gateway.proc is not None:
            archive.launched(gateway.proc.pid)
        SparkContext._gateway = gateway
        SparkContext._jvm = gateway.jvm
        milestone("jvm")


def _spark_conf(conf: dict[str, str], java_options: str):
    spark_conf = SparkConf(loadDefaults=False)
    for key, value in conf.items():
        spark_conf.set(key, value)
    if java_options:
        options = conf.get("spark.driver.extraJavaOptions", "")
        spark_conf.set("spark.driver.extraJavaOptions", f"{options} {java_options}".strip())
    return spark_conf


def _class_archive(conf: dict[str, str]):
    """The driver JVM's class archive (see ``dataflow.jvm_class_archive``), or None."""
    if not settings.DATAFLOW_SPARK_CLASS_ARCHIVE_DIR:
        return None
    class_path = ":".join(conf.get(k, "") for k in ("spark.driver.extraClassPath", "spark.jars"))
    return JvmClassArchive(
        Path(settings.DATAFLOW_SPARK_CLASS_ARCHIVE_DIR),
        java=java_executable(),
        jars_dir=Path(_find_spark_home()) / "jars",
        class_path=class_path,
    )


def _check_can_start() -> None:
    """The start-up checks again (a Celery worker runs no Django system checks), then the
    master or Connect server must answer."""
    problems = landing_errors()
    if problems:
        raise ImproperlyConfigured(" ".join(problems))
    if settings.SPARK_REMOTE:
        _check_reachable(settings.SPARK_REMOTE, "Spark Connect server")
    elif settings.SPARK_MASTER.startswith("spark://"):
        _check_reachable(settings.SPARK_MASTER, "Spark master")


def _connect_builder():
    # The Connect client's own builder: the classic builder would mark the whole process as
    # remote (SPARK_CONNECT_MODE_ENABLED) and refuse while a classic context is alive.
    # Spark Connect's client costs 2 s and 130 MB to import: only a Connect deployment loads it.
    from pyspark.sql.connect.session import SparkSession as ConnectSession  # noqa: PLC0415 - 2 s, 130 MB

    builder = ConnectSession.builder.remote(settings.SPARK_REMOTE)
    for key, value in _conf().items():
        builder = builder.config(key, value)
    return builder


def _check_reachable(url: str, what: str) -> None:
    """Fails fast when no address of ``url`` accepts a TCP connection.

    Spark itself would retry registering with a dead master for a minute, and a Connect
    client retries for minutes; a clear error lets the run's retry with backoff take over.
    """
    default_port = 15002 if url.startswith("sc://") else 7077
    errors = []
    for address in urlsplit(url).netloc.split(","):  # spark://host1:7077,host2:7077 (HA)
        host, _, port = (
            address.rpartition(":") if address.rfind(":") > address.rfind("]") else (address, "", "")
        )
        try:
            with socket.create_connection(
                (host.strip("[]"), int(port or default_port)), timeout=CONNECT_TIMEOUT_S
            ):
                return
        except OSError as exc:
            errors.append(f"{address}: {exc}")
    raise ConnectionError(f"{what} {url} is unreachable: {'; '.join(errors)}")


def session_started() -> bool:
    """Whether this process has a Spark session (its JVM has started)."""
    return _session is not None


def cancel_jobs() -> None:
    """Cancels every Spark job of this process (e.g. on Ctrl-C), if a session exists."""
    with _lock:
        session = _session
    if session is None or settings.SPARK_REMOTE:
        return
    try:
        session.sparkContext.cancelAllJobs()
    except Exception as exc:  # noqa: BLE001 - the process is on its way out anyway
        log.warning("cancelling Spark jobs failed: %s", exc)


def session_recover(*, out_of_memory: bool = False) -> str:
    """After a failed job: makes sure the next job of this process gets a working Spark.
    A JVM that ran out of heap is restarted (its state after an ``OutOfMemoryError`` is
    anyone's guess: Spark's listener thread may be dead, and every job that waits for a
    listener event with it), once no other job of the process runs in it. Otherwise the
    session must answer a one-row job, or its JVM is dropped (it died, or Spark stopped its
    context). Returns "" when the session is healthy, else what was found ("the Spark
    driver ran out of memory", "the Spark driver exited with status 52 (out of memory)")."""
    global _restart_pending
    if out_of_memory and settings.SPARK_REMOTE:
        return "the Spark Connect server's driver ran out of memory"
    with _lock:
        session = _session
        if session is None or settings.SPARK_REMOTE or _pid != os.getpid():
            return "the Spark driver ran out of memory" if out_of_memory else ""
        if out_of_memory:
            found = "the Spark driver ran out of memory"
            if _jobs_running:
                _restart_pending = True  # the last running job restarts it (``spark_job``)
                log.warning("%s; its JVM restarts once the jobs running in it end", found)
                return found
            status = _drop_jvm(graceful=False)
        else:
            try:
                if not _is_stopped(session) and session.range(1).count() == 1:
                    return ""
                found = "Spark stopped the session"
            except Exception as exc:  # noqa: BLE001 - any failure here means the session is gone
                found = f"the Spark session stopped answering ({type(exc).__name__})"
            status = _drop_jvm()
    if status is not None:
        found = f"the Spark driver exited with status {status}" + (
            " (out of memory)" if status == JVM_OOM_EXIT else ""
        )
    log.warning("%s; a new Spark session starts with the next job", found)
    return found


def stuck_tasks(group: JobGroup) -> int:
    """Tasks of the cancelled ``group`` that still run. Spark's tracker stops counting a
    cancelled job's tasks once the job has ended, while their threads may run on for
    minutes; so when no job of another group is active, every task the executors of this
    process still run is counted as the group's (local mode: they are; none of the
    project's other Spark work runs outside a job)."""
    if group.remote:
        return 0
    with _lock:
        if runs_beyond_this_process() or _session is None or _pid != os.getpid():
            return group.running_tasks()
        context = _session.sparkContext
        if _other_groups_active(context, group):
            return group.running_tasks()
        return max(group.running_tasks(), _running_tasks(context))


def kill_stuck_group(group: JobGroup) -> bool:
    """Kills this process's Spark JVM when the only tasks it runs are those of ``group``,
    whose jobs were cancelled and which ignore it (as Spark's task reaper kills an executor
    on a cluster, which local mode does not do); the next job starts a new session. False
    (nothing done) with Spark Connect, on a cluster master, or while any other work runs."""
    with _lock:
        if group.remote or runs_beyond_this_process() or _session is None or _pid != os.getpid():
            return False
        context = _session.sparkContext
        if _other_groups_active(context, group) or not _running_tasks(context):
            return False  # a job of another transform runs: its work is not ours to kill
        log.warning("Spark job group %s: cancelled tasks ignore the cancel; restarting Spark", group.name)
        _drop_jvm(graceful=False)
        return True


def _other_groups_active(context, group: JobGroup) -> bool:
    """Whether a job of another group is active (the group's own cancelled job may still
    count as active: its write waits for the tasks that ignore the cancel)."""
    tracker = context.statusTracker()
    return bool(set(tracker.getActiveJobsIds()) - set(tracker.getJobIdsForGroup(group.name)))


def _running_tasks(context) -> int:
    """Every task the executors of this process run now, by Spark's status store."""
    executors = context._jsc.sc().statusStore().executorList(True)
    return sum(executors.apply(i).activeTasks() for i in range(executors.size()))


def spark_kill() -> None:
    """Kills this process's Spark JVM at once, whatever it runs, and forgets its session:
    the next job starts a new one. For a process whose Spark is known to be stuck."""
    with _lock:
        if _session is not None and _pid == os.getpid():
            _drop_jvm(graceful=False)


def _drop_jvm(*, graceful: bool = True) -> int | None:
    """Stops the process session and its JVM (killed at once unless ``graceful``: a
    graceful stop waits for running tasks) and forgets both (PySpark keeps the gateway of a
    dead JVM and would reuse it); returns the JVM's exit status, None if it was alive."""
    global _session, _restart_pending
    _restart_pending = False
    gateway = SparkContext._gateway
    process = getattr(gateway, "proc", None)
    status = process.poll() if process is not None else None
    if process is not None and status is None and not graceful:
        process.kill()
        process.wait(timeout=30)
    try:
        if _session is not None:
            _session.stop()
    except Exception as exc:  # noqa: BLE001 - a dead JVM cannot answer the stop
        log.debug("stopping a broken Spark session: %s", exc)
    _session = None
    with SparkContext._lock:
        SparkContext._gateway = None
        SparkContext._jvm = None
        SparkContext._active_spark_context = None
    SparkSession._instantiatedSession = None
    SparkSession._activeSession = None
    if process is not None and process.poll() is None:
        process.kill()
        process.wait(timeout=30)
    if gateway is not None:
        try:
            gateway.shutdown()
        except Exception as exc:  # noqa: BLE001 - its JVM is gone already
            log.debug("closing the gateway of a dead JVM: %s", exc)
    return status
