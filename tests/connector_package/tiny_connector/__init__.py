"""A connector package outside this repository: a ``tiny_numbers`` source (the numbers
0 to count-1, read by the sequence connector's source) and a ``tiny_json`` format (JSON
lines under another name). Its entry point is all that makes the service find it."""

from __future__ import annotations

from typing import Any

from connectors.sequence.source import NumberSequenceSource
from source_support.config import ConfigBase, option
from source_support.formats import FormatSpec, FormatType, JsonLinesFormat, register_format
from source_support.formats.registry import SCHEMA_OPTION
from source_support.registry import BuildContext, SourceConnector, register_source


class TinyNumbersConfig(ConfigBase):
    """The ``[source]`` table of a tiny_numbers source."""

    count: int = option("How many numbers, from 0.", minimum=1, maximum=1000, example=10)


def build(config: TinyNumbersConfig, fmt: FormatSpec, context: BuildContext) -> NumberSequenceSource:
    return NumberSequenceSource(count=config.count, splits=1, batch_size=context.batch_size)


def build_format(spec: FormatSpec, schema: Any, entries: bool) -> JsonLinesFormat:
    return JsonLinesFormat(schema)


def register() -> None:
    register_source(
        SourceConnector(
            type="tiny_numbers",
            config=TinyNumbersConfig,
            build=build,
            description="The numbers 0 to count-1, from a connector package of its own.",
        )
    )
    register_format(
        FormatType(
            "tiny_json",
            "JSON lines, from a connector package of its own.",
            (SCHEMA_OPTION,),
            build=build_format,
        )
    )


def broken() -> None:
    """An entry point that registers a type, then fails: what it registered is taken back."""
    register_source(
        SourceConnector(type="half_done", config=TinyNumbersConfig, build=build, description="Never kept.")
    )
    raise RuntimeError("the tiny connector's server library is missing")
