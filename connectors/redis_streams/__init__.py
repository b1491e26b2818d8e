"""Redis streams as a Kafka-like topic ("Rafka"): the streams whose keys match a glob are
its partitions. A source that reads them by entry id, and a ``redis_stream`` sink."""

from connectors.redis_streams.config import (
    CONNECTION_KIND,
    RedisStreamSinkConfig,
    RedisStreamsSourceConfig,
    sink_reads_back,
    validate_url,
)
from connectors.redis_streams.connection import connection_check
from connectors.redis_streams.sink import RedisStreamSink
from connectors.redis_streams.sink import check as sink_check
from connectors.redis_streams.source import RedisStreamsSource
from source_support.connections import ConnectionKind, register_connection_kind
from source_support.registry import SinkConnector, SourceConnector, register_sink, register_source


def register() -> None:
    """The entry point of the ``activedataflow.connectors`` group (``pyproject.toml``)."""
    register_connection_kind(
        ConnectionKind(
            type=CONNECTION_KIND,
            description="A Redis server (redis://, rediss:// or unix://): streams to read or append to.",
            validate_url=validate_url,
            default_port=6379,
            pinnable_schemes=("redis",),
            local_schemes=("unix",),
            check=connection_check,
        )
    )

    register_source(
        SourceConnector(
            type="redis_streams",
            config=RedisStreamsSourceConfig,
            build=RedisStreamsSource.from_config,
            description="Redis streams whose keys match a glob, read as one topic (each stream a split).",
            boundedness="unbounded",
            reads_entries=True,
            sink_reads_back=sink_reads_back,
            output_schema=RedisStreamsSource.output_schema,
        )
    )
    register_sink(
        SinkConnector(
            type="redis_stream",
            config=RedisStreamSinkConfig,
            write=RedisStreamSink.write,
            append=RedisStreamSink.append,
            check=sink_check,
            description="Appends each row as an entry of a Redis stream, once per batch.",
        )
    )
