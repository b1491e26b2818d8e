"""A run's names outside the database: its Redis coordinator and its key. Below the run
engine and the selectors, so both can reach a run's Redis side without importing each other."""

from __future__ import annotations

from django.conf import settings

from dataflow.models import FlowRun
from dataflow.redis_client import get_redis
from source_support.coordination import RunCoordinator


def coordinator_for(run: FlowRun | int) -> RunCoordinator:
    """The Redis side of a run, named by the run's uid (never by its database id)."""
    if isinstance(run, int):
        run = FlowRun.objects.only("uid").get(pk=run)
    lease_ms = int(settings.DATAFLOW_READER_LEASE_SECONDS * 1000)
    return RunCoordinator(
        get_redis(), run_key(run), lease_ms=lease_ms, namespace=settings.DATAFLOW_REDIS_NAMESPACE
    )


def run_key(run: FlowRun) -> str:
    """The run's name outside the database: its Redis keys, landing and staging directories."""
    return run.uid.hex
