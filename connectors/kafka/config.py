"""The ``[source]`` table of a kafka source. Nothing here connects to Kafka: a flow may be
defined before its brokers are up (``Source.check_input`` connects when a run starts)."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any, Self

from connectors.kafka.connection import URL_SCHEMES, mask_servers, split_url
from source_support.config import ConfigBase, connection_field, option
from source_support.durations import parse_instant_ms
from source_support.errors import ConfigError
from source_support.registry import Environment
from source_support.streams.split import ON_RESET_POLICIES

#: The kind of named connection ``bootstrap_servers`` may be replaced by.
CONNECTION_KIND = "kafka"
START_WORDS = ("earliest", "latest")
#: What ``on_reset`` may say.
RESET_POLICIES = ON_RESET_POLICIES
#: Kafka's own rule for topic names.
TOPIC_RE = re.compile(r"[A-Za-z0-9._-]{1,249}")
HOST_PORT_RE = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+)(:\d{1,5})?")
MAX_OFFSET = 2**63 - 1


class KafkaSourceConfig(ConfigBase):
    """A validated ``[source]`` table of a kafka source."""

    connection: str | None = connection_field(CONNECTION_KIND)
    bootstrap_servers: str | None = option(
        "The brokers to bootstrap from, comma-separated: host:9092,host2:9092 or kafka://host:9092 "
        "(kafka+ssl:// for TLS; user:password@ before the first host for SASL/PLAIN, a secret); for "
        "staff and the operator only (others name a connection).",
        default=None,
        secret="url",
        example="kafka://127.0.0.1:9092",
        address=CONNECTION_KIND,
    )
    topics: list[str] | None = option(
        "The topics to read; each partition is a split (or give topic_pattern).",
        default=None,
        example=["orders"],
        scoped=True,
    )
    topic_pattern: str | None = option(
        "Instead of topics: a regular expression the whole topic name must match; topics made "
        "later that match it are read too (from their start).",
        default=None,
        example="orders\\..*",
    )
    start: str = option(
        "Where a partition found when the run starts is first read: earliest, latest or an "
        "ISO-8601 time (2024-05-01T12:00:00Z: the first record at or after it). Partitions found "
        "later are read from their start.",
        default="earliest",
    )
    start_offsets: dict[str, Any] | None = option(
        'The offset to start at for some partitions, by "topic:partition", such as '
        '{"orders:0" = 42}; the others start at source.start.',
        default=None,
        example={"orders:0": 42},
    )
    stop_offsets: dict[str, Any] | None = option(
        'Ends the run: each partition named ("topic:partition") is read up to, not including, its '
        "offset; the others up to their end when the run starts. Instead of a [stop] rule.",
        default=None,
        example={"orders:0": 1000},
    )
    discovery_interval_ms: int = option(
        "How often, in milliseconds, new partitions and new topics matching topic_pattern are "
        "looked for while the flow runs.",
        default=10_000,
        minimum=100,
        maximum=86_400_000,
    )
    on_reset: str = option(
        "What a partition whose offsets went back below the flow's checkpoint does (its topic "
        "deleted and made again, its broker restarted empty, its log start past the checkpoint, "
        "a topic gone for 10 s): fail (its split fails, naming the partition and both offsets) "
        "or restart (it is read again from the new log's first offset as a split of its own, "
        "said as a warning and on the run; records of the old log not read are lost).",
        default="fail",
        choices=RESET_POLICIES,
    )
    metadata: bool = option(
        "Whether each record gets the columns _topic, _partition, _offset, _ts (the record's "
        "timestamp) and _key.",
        default=False,
    )

    def validate(self, env: Environment) -> Self:
        if self.connection is not None and not self.connection.strip():
            raise ConfigError("source.connection", "must name a connection")
        if self.connection is not None and self.bootstrap_servers is not None:
            raise ConfigError(
                "source.connection", "give source.connection or source.bootstrap_servers, not both"
            )
        servers = self.bootstrap_servers
        if servers is None and self.connection is None:
            raise ConfigError(
                "source.bootstrap_servers", "is required (or name a connection in source.connection)"
            )
        if servers is not None:
            servers = validate_servers(servers, "source.bootstrap_servers")
        if (self.topics is None) == (self.topic_pattern is None):
            raise ConfigError("source.topics", "give source.topics or source.topic_pattern (one of them)")
        topics = None if self.topics is None else check_topics(self.topics)
        pattern = None if self.topic_pattern is None else check_pattern(self.topic_pattern)
        start = self.start.strip()
        start_position(start)
        start_offsets = partition_offsets(self.start_offsets, "source.start_offsets", topics, pattern)
        stop_offsets = partition_offsets(self.stop_offsets, "source.stop_offsets", topics, pattern)
        return replace(
            self,
            bootstrap_servers=servers,
            topics=topics,
            topic_pattern=pattern,
            start=start,
            start_offsets=start_offsets,
            stop_offsets=stop_offsets,
        )


def check_topics(topics: list[str]) -> list[str]:
    if not topics:
        raise ConfigError("source.topics", "lists no topic")
    for topic in topics:
        if not TOPIC_RE.fullmatch(topic):
            raise ConfigError(
                "source.topics", f"{topic!r} is not a topic name (letters, digits, '.', '_', '-')"
            )
    return list(dict.fromkeys(topics))


def check_pattern(pattern: str) -> str:
    if not pattern.strip():
        raise ConfigError("source.topic_pattern", "must be a regular expression, such as orders\\..*")
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ConfigError("source.topic_pattern", f"{pattern!r} is not a regular expression: {exc}") from None
    return pattern


def topic_matches(topic: str, topics: list[str] | None, pattern: str | None) -> bool:
    """Whether the source reads ``topic``."""
    if topics is not None:
        return topic in topics
    return pattern is not None and re.fullmatch(pattern, topic) is not None


def partition_key(text: str, field_name: str) -> tuple[str, int]:
    """(topic, partition) of ``"topic:partition"``."""
    topic, sep, partition = text.rpartition(":")
    if not sep or not TOPIC_RE.fullmatch(topic) or not partition.isdigit():
        raise ConfigError(field_name, f'{text!r} is not "topic:partition", such as "orders:0"')
    return topic, int(partition)


def partition_offsets(
    offsets: dict[str, Any] | None, field_name: str, topics: list[str] | None, pattern: str | None
) -> dict[str, int] | None:
    """The offsets of a ``start_offsets``/``stop_offsets`` table, each key a partition the
    source reads and each value an offset."""
    if offsets is None:
        return None
    if not offsets:
        raise ConfigError(field_name, "names no partition; leave it out instead")
    checked: dict[str, int] = {}
    for key, offset in offsets.items():
        topic, partition = partition_key(key, field_name)
        if not topic_matches(topic, topics, pattern):
            raise ConfigError(field_name, f"{key!r}: topic {topic!r} is not one the source reads")
        if isinstance(offset, bool) or not isinstance(offset, int) or not 0 <= offset <= MAX_OFFSET:
            raise ConfigError(
                f"{field_name}.{key}", f"must be an offset (a whole number >= 0), not {offset!r}"
            )
        checked[f"{topic}:{partition}"] = offset
    return checked


def start_position(start: str) -> tuple[str, int | None]:
    """What ``start`` means: ("earliest"|"latest", None) or ("time", ms); ConfigError
    naming ``source.start`` otherwise."""
    if start in START_WORDS:
        return start, None
    try:
        return "time", parse_instant_ms(start)
    except ValueError:
        raise ConfigError(
            "source.start",
            f"{start!r} is not earliest, latest or an ISO-8601 time (2024-05-01T12:00:00Z); "
            "give offsets in source.start_offsets",
        ) from None


def validate_servers(servers: str, field_name: str) -> str:
    """``servers`` if it names Kafka brokers; the error shows it masked."""
    text = servers.strip()
    if "://" in text and not text.startswith(URL_SCHEMES):
        raise ConfigError(field_name, f"{mask_servers(text)!r} must start with {', '.join(URL_SCHEMES)}")
    _, _, _, hosts = split_url(text)
    if not hosts:
        raise ConfigError(field_name, "names no broker, such as kafka://127.0.0.1:9092")
    for host in hosts:
        if not HOST_PORT_RE.fullmatch(host):
            raise ConfigError(field_name, f"{host!r} is not host:port, such as 127.0.0.1:9092")
    return text


def validate_connection_url(url: str, field_name: str) -> str:
    """A connection's URL: ``kafka://`` or ``kafka+ssl://`` brokers (``validate_servers``)."""
    if not url.strip().startswith(URL_SCHEMES):
        raise ConfigError(
            field_name, f"must start with {', '.join(URL_SCHEMES)}, such as kafka://broker:9092"
        )
    return validate_servers(url, field_name)


def kafka_target(config: dict[str, Any], env: Environment) -> tuple[str, tuple[str, ...]]:
    """The brokers a config connects to and the topic patterns it is limited to."""
    name = config.get("connection")
    if name:
        target = env.connection(name, "source.connection")
        return target.url, target.key_patterns
    return config["bootstrap_servers"], ()
