"""NATS JetStream: a source that reads a stream's subject filters (each a split) through
consumers named after the flow, and a ``nats`` sink that publishes rows effectively once."""

from connectors.nats.config import (
    CONNECTION_KIND,
    NatsSinkConfig,
    NatsSourceConfig,
    sink_reads_back,
    validate_servers,
)
from connectors.nats.connection import connection_check
from connectors.nats.sink import NatsSink
from connectors.nats.source import NatsJetStreamSource
from source_support.connections import ConnectionKind, register_connection_kind
from source_support.registry import SinkConnector, SourceConnector, register_sink, register_source


def register() -> None:
    """The entry point of the ``activedataflow.connectors`` group (``pyproject.toml``)."""
    register_connection_kind(
        ConnectionKind(
            type=CONNECTION_KIND,
            description="NATS servers (nats://, tls://; comma-separated): JetStream streams to read or publish to.",
            validate_url=validate_servers,
            default_port=4222,
            pinnable_schemes=("nats",),
            check=connection_check,
        )
    )

    register_source(
        SourceConnector(
            type="nats_jetstream",
            config=NatsSourceConfig,
            build=NatsJetStreamSource.from_config,
            check_stop=NatsJetStreamSource.check_stop,
            description="A NATS JetStream stream, read through one consumer per subject filter (each a split).",
            boundedness="unbounded",
            reads_entries=True,
            sink_reads_back=sink_reads_back,
            output_schema=NatsJetStreamSource.output_schema,
        )
    )
    register_sink(
        SinkConnector(
            type="nats",
            config=NatsSinkConfig,
            write=NatsSink.write,
            append=NatsSink.append,
            description="Publishes each row as a JSON message to a NATS subject, effectively once (Nats-Msg-Id).",
        )
    )
