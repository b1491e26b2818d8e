"""System checks: a landing zone that cannot work is refused at start-up.

Readers write each batch under ``DATAFLOW_LANDING_ROOT`` and the Spark job reads those
files by path. With a cluster master or Spark Connect the reading happens in other
processes, usually on other machines, so the path must name the same files there.
"""

from __future__ import annotations

from django.core.checks import Error

from dataflow.spark.deployment import landing_problems


def check_landing_zone(app_configs=None, **kwargs) -> list[Error]:
    """Django system check (registered in ``DataflowConfig.ready``)."""
    return [Error(message, id=check_id) for check_id, message in landing_problems()]
