"""A run's names and parts outside the database: its Redis coordinator, its key, the
landing zone, and its source built from the spec it started with. The floor under every
service that drives or reads a run, so none of them imports another for these."""

from __future__ import annotations

from django.conf import settings

from dataflow.encryption import secrets_check
from dataflow.models import DataFlow, FlowRun, RunStatus
from dataflow.redis_client import get_redis
from dataflow.services.environment import flow_environment
from source_support.api import Source
from source_support.coordination import RedisRunCoordinator
from source_support.formats import FormatSpec
from source_support.landing import LandingZone
from source_support.registry import BuildContext, Environment, build_source
from source_support.schema import parse_ddl


def coordinator_for(run: FlowRun | int) -> RedisRunCoordinator:
    """The Redis side of a run, named by the run's uid (never by its database id)."""
    if isinstance(run, int):
        run = FlowRun.objects.only("uid").get(pk=run)
    lease_ms = int(settings.DATAFLOW_READER_LEASE_SECONDS * 1000)
    return RedisRunCoordinator(
        get_redis(), run_key(run), lease_ms=lease_ms, namespace=settings.DATAFLOW_REDIS_NAMESPACE
    )


def run_key(run: FlowRun) -> str:
    """The run's name outside the database: its Redis keys, landing and staging directories."""
    return run.uid.hex


def landing_zone() -> LandingZone:
    """Where readers land what they read, for the transform to take."""
    return LandingZone(settings.DATAFLOW_LANDING_ROOT, fsync=settings.DATAFLOW_LANDING_FSYNC)


def run_secrets_check(run: FlowRun) -> None:
    """Refuses (``SecretUndecryptable``, naming the run's flow, the secrets and the setting)
    a run whose spec holds a secret that no key of ``DATAFLOW_SECRET_KEYS`` decrypts: the
    run cannot go on, and fails at once where the engine meets it."""
    secrets_check(run.spec, what=f"run {run.pk} of flow {run.spec.get('name', '')!r}")


def source_for(run: FlowRun) -> Source:
    """The run's source, built from the spec it started with (``run_secrets_check`` first)."""
    run_secrets_check(run)
    spec = run.spec
    schema = parse_ddl(run.schema_ddl) if run.schema_ddl else None
    context = BuildContext(
        env=run_environment(run),
        batch_size=spec["batch_size"],
        schema=schema,
        flow_name=spec["name"],
        stop=spec.get("stop_rule") or {},
        previous_state=previous_succeeded_state(run),
        earlier_states=upstream_states(run),
    )
    return build_source(
        spec["source_type"],
        spec["source_config"],
        FormatSpec(spec["format_type"], spec["format_options"]),
        context,
    )


def previous_succeeded_state(run: FlowRun) -> dict | None:
    """The enumerator state of the flow's last succeeded run before ``run``."""
    return (
        FlowRun.objects.filter(flow_id=run.flow_id, status=RunStatus.SUCCEEDED, pk__lt=run.pk)
        .order_by("-pk")
        .values_list("enumerator_state", flat=True)
        .first()
    )


#: Earlier runs whose states a source sees (the newest that made something upstream).
EARLIER_STATES = 5


def upstream_states(run: FlowRun) -> tuple[dict, ...]:
    """The enumerator states of the flow's earlier runs that made a cdc slot, newest first
    (at most ``EARLIER_STATES``): while the flow exists, it owns that slot. Asked only of a
    source that makes one (a postgres table in cdc mode)."""
    if (
        run.spec.get("source_type") != "postgres"
        or (run.spec.get("source_config") or {}).get("mode") != "cdc"
    ):
        return ()
    states = (
        FlowRun.objects.filter(
            flow_id=run.flow_id, pk__lt=run.pk, enumerator_state__plan__stream_lsn__isnull=False
        )
        .order_by("-pk")
        .values_list("enumerator_state", flat=True)[:EARLIER_STATES]
    )
    return tuple(state for state in states if state)


def run_environment(run: FlowRun) -> Environment:
    """The environment the run's source and sink are built in: its connections resolved
    for the flow's owner now (a revoked grant stops the build with a ConfigError)."""
    run_secrets_check(run)
    flow = DataFlow.objects.select_related("owner").get(pk=run.flow_id)
    return flow_environment(run.spec, owner=flow.owner)
