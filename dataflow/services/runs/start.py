"""What a run starts with: its schema (given, or inferred from the input as it is now) and
its first splits, discovered inside the transaction that creates it."""

from __future__ import annotations

from typing import Any

from dataflow.limits import SplitCeilingReached
from dataflow.models import FlowRun
from dataflow.services.context import coordinator_for, source_for
from dataflow.services.environment import flow_environment
from dataflow.store import DjangoRunStore
from source_support.errors import ConfigError
from source_support.formats import FormatSpec
from source_support.registry import BuildContext, build_source, source_is_unbounded, source_output_schema
from source_support.runtime import enumerator_start
from source_support.schema import parse_ddl, to_ddl


def run_schema_resolve(values: dict[str, Any], *, owner) -> str:
    """The run's schema: the one given, or inferred now from the first file's first MiB;
    the input is then checked against it (``Source.check_input``: e.g. CSV headers)."""
    fmt = FormatSpec(values["format_type"], values["format_options"])
    env = flow_environment(values, owner=owner)

    def source_with(schema):
        context = BuildContext(
            env=env, batch_size=1, schema=schema, flow_name=values["name"], stop=values["stop_rule"]
        )
        return build_source(values["source_type"], values["source_config"], fmt, context)

    schema = parse_ddl(fmt.options["schema"]) if "schema" in fmt.options else None
    if schema is not None:
        schema = source_output_schema(values["source_type"], values["source_config"], schema)
    source = source_with(schema)
    if schema is None:
        try:
            schema = source.infer_schema()
        except Exception as exc:  # noqa: BLE001 - any parse failure means the same to the user
            raise ConfigError("format.schema", f"could not be inferred ({exc}); give it explicitly") from None
        if schema is None:
            if source_is_unbounded(values["source_type"], values["source_config"]):
                raise ConfigError(
                    "format.schema",
                    "is required: the source holds nothing yet to infer it from (a stream "
                    "or a watched directory fills later)",
                )
            return ""
        source = source_with(schema)
    source.check_input()
    return to_ddl(schema)


def run_prepare(run: FlowRun) -> None:
    """Discovers the run's splits as it starts (inside the transaction that creates it).
    ConfigError on ``source`` if it finds more than the flow may have."""
    try:
        enumerator_start(
            source=source_for(run),
            coordinator=coordinator_for(run),
            store=DjangoRunStore(run),
            parallelism=run.spec["parallelism"],
        )
    except SplitCeilingReached as exc:
        raise ConfigError("source", str(exc)) from None
