"""System checks: a landing zone that cannot work is refused at start-up.

Readers write each batch under ``DATAFLOW_LANDING_ROOT`` and the Spark job reads those
files by path. With a cluster master or Spark Connect the reading happens in other
processes, usually on other machines, so the path must name the same files there.
"""

from __future__ import annotations

import re
from pathlib import Path

from django.conf import settings
from django.core.checks import Error

from dataflow.spark import is_local_master

_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:/")  # s3a://bucket/x (a Path keeps "s3a:/bucket/x")


def landing_errors() -> list[str]:
    """What is wrong with the landing zone for the Spark settings; empty if nothing."""
    return [message for _, message in _landing_problems()]


def check_landing_zone(app_configs=None, **kwargs) -> list[Error]:
    """Django system check (registered in ``DataflowConfig.ready``)."""
    return [Error(message, id=check_id) for check_id, message in _landing_problems()]


def _landing_problems() -> list[tuple[str, str]]:
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
