"""Amazon Kinesis Data Streams: a source that reads a stream's shards (each a split), a
reshard's children only after their parents are read to their end."""

from connectors.kinesis.config import KinesisSourceConfig
from connectors.kinesis.source import KinesisSource
from source_support.registry import SourceConnector, register_source

__all__ = ["KinesisSource", "KinesisSourceConfig", "register"]


def register() -> None:
    """The entry point of the ``activedataflow.connectors`` group (``pyproject.toml``)."""
    register_source(
        SourceConnector(
            type="kinesis",
            config=KinesisSourceConfig,
            build=KinesisSource.from_config,
            check_stop=KinesisSource.check_stop,
            description=(
                "An Amazon Kinesis data stream (or a Kinesis-compatible endpoint), each shard a split; "
                "a reshard's children are read once their parents are read to their end."
            ),
            boundedness="unbounded",
            reads_entries=True,
            output_schema=KinesisSource.output_schema,
        )
    )
