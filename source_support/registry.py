"""Connector registry: each source and sink type with its config class (``ConfigBase``),
from which its options, parsing and stored form follow. Connectors are registered by the
plugins of the ``activedataflow.connectors`` entry points (``source_support.plugins``).

The admin, the REST API and TOML files all validate through ``validate_source`` and
``validate_sink``, so a config is refused the same way, naming the same field, wherever it
comes from. ``connector_catalog`` describes every source, format and sink with the JSON
Schema of its table, and ``mask_section`` shows a table with its secrets masked; both are
derived from the same ``Option`` declarations that the validators check against.
"""

from __future__ import annotations

import glob
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Literal, Protocol, TypeVar

import pyarrow as pa

from source_support.api import Source
from source_support.config import ConfigBase
from source_support.environment import Environment
from source_support.errors import ConfigError
from source_support.formats import FORMATS, FormatSpec, FormatType, format_type
from source_support.options import (
    Option,
    mask_config,
    options_json_schema,
    paths_relative_to,
    unmask_config,
)

if TYPE_CHECKING:
    # Only the sinks' signatures name Spark's DataFrame: a sink is handed one by the run,
    # and nothing here imports Spark at run time.
    from pyspark.sql import DataFrame


def glob_static_prefix(pattern: str) -> str:
    """The part of a glob before its first wildcard (the whole path when it has none)."""
    if not glob.has_magic(pattern):
        return pattern
    parts: list[str] = []
    for part in pattern.split("/"):
        if glob.has_magic(part):
            break
        parts.append(part)
    return "/".join(parts) or "/"


@dataclass(frozen=True)
class BuildContext:
    """What a source is built with besides its own validated config."""

    env: Environment
    batch_size: int
    #: The run's schema, fixed when it starts (None: infer it).
    schema: pa.Schema | None = None
    #: The flow's name: a stream source names its consumer group after it.
    flow_name: str = ""
    #: The validated ``[stop]`` rule (empty: run until stopped); see ``dataflow.services.specs``.
    stop: Mapping[str, Any] = field(default_factory=dict[str, Any])
    #: The enumerator state of the flow's last succeeded run before this one (None: there
    #: is none): an incremental source takes its high mark from it, so the mark is
    #: committed with the run that read up to it and a failed run is read again.
    previous_state: Mapping[str, Any] | None = None
    #: The enumerator states of the flow's earlier runs that made something upstream (a cdc
    #: slot), newest first: a new run resumes from what the flow still owns there.
    earlier_states: tuple[Mapping[str, Any], ...] = ()
    #: A preview or a test of a connection, not a run: nothing may be held for readers that
    #: will never come (a database snapshot kept open, a consumer made upstream).
    probe: bool = False


def _no_read_back(source: dict[str, Any], sink_type: str, sink: dict[str, Any], env: Environment) -> str:
    return ""


ConfigT = TypeVar("ConfigT", bound=ConfigBase)


def _never_unbounded(config: ConfigBase) -> bool:
    return False


def _always_unbounded(config: ConfigBase) -> bool:
    return True


def _same_schema(config: ConfigBase, schema: pa.Schema) -> pa.Schema:
    return schema


def _any_stop(config: ConfigBase, stop: Mapping[str, Any]) -> None:
    pass


#: Whether a source's runs end: always ("bounded"), never ("unbounded"), or as its config
#: says ("config", e.g. files with ``watch``).
Boundedness = Literal["bounded", "unbounded", "config"]


@dataclass(frozen=True)
class SourceConnector(Generic[ConfigT]):
    """A source type. ``build``, ``unbounded`` and ``output_schema`` receive an instance of
    ``config``, never the stored dict."""

    type: str
    config: type[ConfigT]
    #: The source's splits are its own type; the registry holds sources of every kind.
    build: Callable[[ConfigT, FormatSpec, BuildContext], Source[Any]]
    description: str = ""
    #: Whether it can read without end; with "config", ``unbounded`` says for a config.
    boundedness: Boundedness = "bounded"
    #: Whether a config reads without end (a stream, files with ``watch``); left out, what
    #: ``boundedness`` says.
    unbounded: Callable[[ConfigT], bool] = _never_unbounded
    #: Why a sink would feed this source back its own output (empty: it would not); a
    #: file sink inside a file source is refused by the path checks of every flow.
    sink_reads_back: Callable[[dict[str, Any], str, dict[str, Any], Environment], str] = _no_read_back
    #: Whether records come as entries (field/value pairs) rather than lines of text.
    reads_entries: bool = False
    #: The columns a run lands for a format schema (e.g. metadata columns added).
    output_schema: Callable[[ConfigT, pa.Schema], pa.Schema] = _same_schema
    #: Refuses (a ConfigError naming its field) a validated ``[stop]`` rule (``BuildContext.stop``)
    #: the source cannot keep, when the flow is saved; its ``build`` is given only rules it took.
    check_stop: Callable[[ConfigT, Mapping[str, Any]], None] = _any_stop

    def __post_init__(self) -> None:
        if self.boundedness == "unbounded" and self.unbounded is _never_unbounded:
            object.__setattr__(self, "unbounded", _always_unbounded)

    @property
    def options(self) -> tuple[Option, ...]:
        """The fields of its ``[source]`` table, as its config class declares them."""
        return self.config.OPTIONS


#: ``publish(staged_rows, swap)``: the caller's fence. It checks the rows and whether the
#: attempt may still publish, and if so calls ``swap()`` and returns True.
Publish = Callable[[int, Callable[[], object]], bool]


class SinkWrite(Protocol):
    """Writes a bounded run's result, publishing it through ``publish``; whether it was
    published. ``attempt_key`` names the run's attempt."""

    def __call__(
        self, df: DataFrame, config: dict[str, Any], *, attempt_key: str, publish: Publish, env: Environment
    ) -> bool: ...


class SinkAppend(Protocol):
    """Adds one epoch of an unbounded run's streaming transform, once per ``epoch_key``,
    through ``publish``; whether it was published."""

    def __call__(
        self, df: DataFrame, config: dict[str, Any], *, epoch_key: str, publish: Publish, env: Environment
    ) -> bool: ...


class SinkWriteLanded(Protocol):
    """Writes a bounded run's landed Parquet files (``paths``, each of the run's ``schema``)
    as its whole result, without Spark, publishing it through ``publish`` as ``SinkWrite``
    does; whether it was published. Used only when the transform is the identity and the
    sink's ``takes_landed(config)`` says yes."""

    def __call__(
        self,
        paths: Sequence[str],
        schema: pa.Schema,
        config: dict[str, Any],
        *,
        attempt_key: str,
        publish: Publish,
        env: Environment,
    ) -> bool: ...


class SinkAppendLanded(Protocol):
    """Adds one epoch of an unbounded run's landed Parquet files (``paths``, each of the
    run's ``schema``) to the sink as they are, without Spark, once per ``epoch_key``,
    through ``publish`` as ``SinkAppend`` does; whether it was published. Used only when
    the transform is the identity and the sink's ``takes_landed(config)`` says yes."""

    def __call__(
        self,
        paths: Sequence[str],
        schema: pa.Schema,
        config: dict[str, Any],
        *,
        epoch_key: str,
        publish: Publish,
        env: Environment,
    ) -> bool: ...


class SinkAppendTable(Protocol):
    """Adds one small epoch of an unbounded run's streaming transform, computed by Spark and
    collected as an Arrow ``table``, written without Spark's file writer, once per
    ``epoch_key``, through ``publish`` as ``SinkAppend`` does; whether it was published.
    Used only where the sink's ``takes_landed(config)`` says yes and the table's types are
    written as Spark's writer would write them."""

    def __call__(
        self, table: pa.Table, config: dict[str, Any], *, epoch_key: str, publish: Publish, env: Environment
    ) -> bool: ...


def _takes_no_landed(config: dict[str, Any]) -> bool:
    return False


@dataclass(frozen=True)
class SinkConnector:
    """A sink type. Its writers are handed the stored dict of its ``config``
    (``config.from_dict`` makes it typed again)."""

    type: str
    config: type[ConfigBase]
    write: SinkWrite
    description: str = ""
    #: Adds one epoch of an unbounded run's streaming transform (None: the sink cannot
    #: take a stream).
    append: SinkAppend | None = None
    #: Writes a bounded run's landed files as they are, with no Spark job, for a run whose
    #: transform is ``SELECT * FROM source`` (None: the sink always goes through Spark).
    write_landed: SinkWriteLanded | None = None
    #: Adds an unbounded run's landed files of one epoch as they are, with no Spark job,
    #: for a run whose transform is ``SELECT * FROM source`` (None: epochs go through Spark).
    append_landed: SinkAppendLanded | None = None
    #: Adds a small epoch's rows collected as Arrow, with no Spark file writer (whose
    #: commit protocol costs more than a small epoch's job); None: Spark writes every epoch.
    append_table: SinkAppendTable | None = None
    #: Whether ``write_landed``, ``append_landed`` and ``append_table`` can write a config's
    #: output (e.g. no ``partition_by``).
    takes_landed: Callable[[dict[str, Any]], bool] = _takes_no_landed
    #: The bytes a bounded write (``write``) with ``attempt_key`` holds in its staging so
    #: far, for a config; None where it cannot tell (the service then bounds only rows).
    staging_bytes: Callable[[dict[str, Any], str], int | None] | None = None
    #: What a test of the connection finds where a stored config writes (lines in the
    #: sink's own words: a table and its row estimate, a stream and its length), or a
    #: ConfigError saying what failed; None: the sink cannot be looked at before a run.
    check: Callable[[dict[str, Any], Environment], list[str]] | None = None

    @property
    def options(self) -> tuple[Option, ...]:
        """The fields of its ``[sink]`` table, as its config class declares them."""
        return self.config.OPTIONS

    def validate(self, table: dict[str, Any], env: Environment) -> dict[str, Any]:
        """The dict to store of a ``[sink]`` table (without ``type``), or a ConfigError."""
        return self.config.parse(table, env).to_dict()


#: Each connector's config is its own type: the registry holds them all.
SOURCES: dict[str, SourceConnector[Any]] = {}
SINKS: dict[str, SinkConnector] = {}
#: The connector plugins that failed to load (``source_support.plugins``): why, by entry point.
FAILED_PLUGINS: dict[str, str] = {}


def register_source(connector: SourceConnector[Any]) -> None:
    """Adds a source type; a type registered already is refused (two plugins would
    otherwise replace each other's connector in silence)."""
    _check_new("source", connector.type, SOURCES)
    SOURCES[connector.type] = connector


def register_sink(connector: SinkConnector) -> None:
    """Adds a sink type; a type registered already is refused."""
    _check_new("sink", connector.type, SINKS)
    SINKS[connector.type] = connector


def _check_new(section: str, type_name: str, registry: Mapping[str, object]) -> None:
    if type_name in registry:
        raise ValueError(f"{section} type {type_name!r} is registered already")


_ConnectorT = TypeVar("_ConnectorT")


def _lookup(
    table: Mapping[str, Any], registry: Mapping[str, _ConnectorT], section: str
) -> tuple[_ConnectorT, dict[str, Any]]:
    config = dict(table)
    type_name = config.pop("type", None)
    known = ", ".join(sorted(registry))
    if not type_name:
        raise ConfigError(f"{section}.type", f"is required (one of: {known})")
    if type_name not in registry:
        failed = (
            f"; connector plugins that failed to load: {', '.join(FAILED_PLUGINS)}" if FAILED_PLUGINS else ""
        )
        raise ConfigError(
            f"{section}.type", f"unknown {section} type {type_name!r} (one of: {known}{failed})"
        )
    return registry[type_name], config


def validate_source(table: dict[str, Any], env: Environment) -> tuple[str, dict[str, Any]]:
    """The source type and the dict to store of its validated config."""
    connector, config = _lookup(table, SOURCES, "source")
    return connector.type, connector.config.parse(config, env).to_dict()


def validate_sink(table: dict[str, Any], env: Environment) -> tuple[str, dict[str, Any]]:
    connector, config = _lookup(table, SINKS, "sink")
    return connector.type, connector.validate(config, env)


def source_is_unbounded(type_name: str, stored: dict[str, Any]) -> bool:
    connector = SOURCES[type_name]
    return connector.unbounded(connector.config.from_dict(stored))


def source_output_schema(type_name: str, stored: dict[str, Any], schema: pa.Schema) -> pa.Schema:
    connector = SOURCES[type_name]
    return connector.output_schema(connector.config.from_dict(stored), schema)


def build_source(
    type_name: str, stored: dict[str, Any], fmt: FormatSpec, context: BuildContext
) -> Source[Any]:
    """The source of a stored (validated) config."""
    connector = SOURCES[type_name]
    return connector.build(connector.config.from_dict(stored), fmt, context)


SECTIONS = ("source", "format", "sink")


def address_option(options: tuple[Option, ...]) -> Option | None:
    """The option of a connector that is a network address (``Option.address``), if any."""
    return next((option for option in options if option.address), None)


def section_options(section: str, type_name: object) -> tuple[Option, ...]:
    """The options of a ``source``, ``format`` or ``sink`` type (a format alias too); ()
    for an unknown section or type (``type_name`` is what a table holds: maybe not a string)."""
    if not isinstance(type_name, str):
        return ()
    if section == "format":
        kind = format_type(type_name)
        return kind.options if kind else ()
    if section == "source":
        source = SOURCES.get(type_name)
        return source.options if source else ()
    sink = SINKS.get(type_name) if section == "sink" else None
    return sink.options if sink else ()


def mask_section(section: str, config_with_type: dict[str, Any]) -> dict[str, Any]:
    """A copy of a table (with its ``type``) that may be shown: its secrets masked."""
    return mask_config(section_options(section, config_with_type.get("type")), config_with_type)


def paths_relative_section(section: str, config_with_type: dict[str, Any], base_dir: Path) -> dict[str, Any]:
    """A copy of a table (with its ``type``) whose filesystem paths under ``base_dir`` are
    written relative to it (see ``options.paths_relative_to``)."""
    return paths_relative_to(
        section_options(section, config_with_type.get("type")), config_with_type, base_dir
    )


def unmask_section(section: str, new: dict[str, Any], stored: dict[str, Any]) -> dict[str, Any]:
    """A copy of a table sent back (with its ``type``) in which each secret left as
    ``mask_section`` showed it is the stored secret again (see ``unmask_config``)."""
    if new.get("type") != stored.get("type"):
        return dict(new)  # another type: nothing stored applies
    return unmask_config(section_options(section, new.get("type")), new, stored)


def connector_catalog() -> dict[str, list[dict[str, Any]]]:
    """Every source, format and sink type with its description and the JSON Schema of its
    table, by type name: what the API lists and the admin builds its forms from."""
    return {
        "sources": [_source_entry(SOURCES[name]) for name in sorted(SOURCES)],
        "formats": [_format_entry(FORMATS[name]) for name in sorted(FORMATS)],
        "sinks": [_sink_entry(SINKS[name]) for name in sorted(SINKS)],
    }


_UNBOUNDED = {"bounded": False, "unbounded": True, "config": "config"}


def _source_entry(connector: SourceConnector[Any]) -> dict[str, Any]:
    return {
        "type": connector.type,
        "description": connector.description,
        "unbounded": _UNBOUNDED[connector.boundedness],
        "schema": options_json_schema(
            connector.options,
            title=f"{connector.type} source",
            type_name=connector.type,
            description=connector.description,
        ),
    }


def _format_entry(kind: FormatType) -> dict[str, Any]:
    return {
        "type": kind.type,
        "description": kind.description,
        "schema": options_json_schema(
            kind.options, title=f"{kind.type} format", type_name=kind.type, description=kind.description
        ),
    }


def _sink_entry(connector: SinkConnector) -> dict[str, Any]:
    return {
        "type": connector.type,
        "description": connector.description,
        "appends": connector.append is not None,
        "schema": options_json_schema(
            connector.options,
            title=f"{connector.type} sink",
            type_name=connector.type,
            description=connector.description,
        ),
    }
