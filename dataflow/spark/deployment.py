"""Where Spark runs (local, a cluster master, Spark Connect), and what that asks of the
landing zone: readers write each batch under ``DATAFLOW_LANDING_ROOT`` and the Spark job
reads those files by path, so with a cluster master or Spark Connect the path must name the
same files in other processes, usually on other machines. No PySpark import here: the
system checks (``dataflow.checks``) and web processes use it.
"""

from __future__ import annotations

import re
from pathlib import Path

from django.conf import settings


def is_local_master(master: str) -> bool:
    """True for masters that run every executor on this machine (``local``, ``local[4]``...)."""
    return master == "local" or master.startswith(("local[", "local-cluster["))


def runs_beyond_this_process() -> bool:
    """True when Spark reads the landing zone from other processes or machines."""
    return bool(settings.SPARK_REMOTE) or not is_local_master(settings.SPARK_MASTER)


def stop_after_job() -> bool:
    """Whether the process session is stopped when its last running job ends."""
    if settings.SPARK_STOP_AFTER_JOB is not None:
        return settings.SPARK_STOP_AFTER_JOB
    return runs_beyond_this_process()


_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:/")  # s3a://bucket/x (a Path keeps "s3a:/bucket/x")


def landing_errors() -> list[str]:
    """What is wrong with the landing zone for the Spark settings; empty if nothing."""
    return [message for _, message in landing_problems()]


def landing_problems() -> list[tuple[str, str]]:
    """What is wrong with the landing zone for the Spark settings, as (check id, message)."""
    root = Path(settings.DATAFLOW_LANDING_ROOT)
    problems = []
    if _URL.match(str(root)):
        problems.append(
            (
                "dataflow.E003",
                f"DATAFLOW_LANDING_ROOT={settings.DATAFLOW_LANDING_ROOT} names object storage, which "
                'is not supported as a landing zone yet (README, "Object storage"). Mount one '
                "shared filesystem at the same path on every Celery worker and Spark node instead.",
            )
        )
    elif not root.is_absolute():
        problems.append(
            (
                "dataflow.E001",
                f"DATAFLOW_LANDING_ROOT={root} is a relative path: each process would resolve it "
                "against its own working directory. Set an absolute path.",
            )
        )
    if settings.SPARK_REMOTE:
        where = f"SPARK_REMOTE={settings.SPARK_REMOTE} (the Spark Connect server and its executors)"
    elif not is_local_master(settings.SPARK_MASTER):
        where = f"SPARK_MASTER={settings.SPARK_MASTER} (the cluster's executors)"
    else:
        where = None
    if where and not settings.DATAFLOW_LANDING_SHARED:
        problems.append(
            (
                "dataflow.E002",
                f"With {where} Spark reads landed files outside the Celery workers, but the "
                f"landing root {root} is not declared shared. Mount one shared filesystem (e.g. "
                "NFS) at the same path on every Celery worker and every Spark node, point "
                "DATAFLOW_LANDING_ROOT at it and set DATAFLOW_LANDING_SHARED=1; or run Spark with "
                "SPARK_MASTER=local[*].",
            )
        )
    return problems
