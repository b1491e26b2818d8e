"""Kafka: a source that reads the partitions of some topics (each a split) through
consumers assigned by the enumerator, committing offsets to a group named after the flow
only after our own commit (for monitoring)."""

from connectors.kafka.config import CONNECTION_KIND, KafkaSourceConfig, validate_connection_url
from connectors.kafka.connection import DEFAULT_PORT
from connectors.kafka.source import KafkaSource
from source_support.connections import ConnectionKind, register_connection_kind
from source_support.registry import SourceConnector, register_source


def register() -> None:
    """The entry point of the ``activedataflow.connectors`` group (``pyproject.toml``)."""
    register_connection_kind(
        ConnectionKind(
            type=CONNECTION_KIND,
            description="Kafka brokers (kafka://host:9092,host2:9092; kafka+ssl:// for TLS; "
            "user and password for SASL/PLAIN): topics to read.",
            validate_url=validate_connection_url,
            default_port=DEFAULT_PORT,
            pinnable_schemes=("kafka",),
        )
    )
    register_source(
        SourceConnector(
            type="kafka",
            config=KafkaSourceConfig,
            build=KafkaSource.from_config,
            check_stop=KafkaSource.check_stop,
            description="Kafka topics (a list or a pattern), each partition a split, read from offsets "
            "kept in the flow's checkpoints.",
            boundedness="unbounded",
            reads_entries=True,
            output_schema=KafkaSource.output_schema,
        )
    )
