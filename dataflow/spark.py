"""The Spark session of this process: created lazily, never at import or in a prefork parent.

PySpark is not fork-safe (py4j, gRPC), so the session is made in the process that runs the
job, on first use. ``warm_up`` starts it in a background thread so that the ~8 s a JVM needs
to start overlap with the readers' work.
"""

from __future__ import annotations

import os
import threading

from django.conf import settings

_lock = threading.Lock()
_session = None
_pid = None


def get_spark():
    """The process-wide SparkSession, made on first call (thread-safe)."""
    global _session, _pid
    with _lock:
        if _session is None or _pid != os.getpid():
            _session = _build()
            _pid = os.getpid()
        return _session


def warm_up() -> threading.Thread:
    """Starts the session in the background; the returned thread ends when it is ready."""
    thread = threading.Thread(target=get_spark, name="spark-warm-up", daemon=True)
    thread.start()
    return thread


def stop_spark() -> None:
    global _session
    with _lock:
        if _session is not None:
            _session.stop()
            _session = None


def _build():
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName("activedataflow")
    if settings.SPARK_REMOTE:
        builder = builder.remote(settings.SPARK_REMOTE)
    else:
        builder = builder.master(settings.SPARK_MASTER)
        builder = builder.config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
    conf = {
        # A transform may read only the view it is given, never a path of its choosing.
        "spark.sql.runSQLOnFiles": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.sources.partitionOverwriteMode": "static",
        **settings.SPARK_CONF,
    }
    for key, value in conf.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    if not settings.SPARK_REMOTE:
        session.sparkContext.setLogLevel("WARN")
    return session
