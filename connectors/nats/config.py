"""The ``[source]`` table of a nats_jetstream source and the ``[sink]`` table of a nats
sink. Nothing here connects to NATS: a flow may be defined before its server is up
(``Source.check_input`` connects when a run starts)."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any, Self

from connectors.nats.connection import URL_SCHEMES, mask_servers, server_list
from source_support.config import ConfigBase, connection_field, option
from source_support.durations import parse_duration_ms, parse_instant_ms
from source_support.errors import ConfigError
from source_support.registry import Environment
from source_support.streams.split import ON_RESET_POLICIES

#: The kind of named connection ``servers`` may be replaced by.
CONNECTION_KIND = "nats"
DEFAULT_CONSUMER = "default"
START_WORDS = ("earliest", "latest")
#: Stream names: no white space, dots, wildcards or path separators (NATS's own rule).
STREAM_NAME_RE = re.compile(r"[^\s.*>/\\]{1,255}")
SUBJECT_TOKEN_RE = re.compile(r"[^\s.*>]+")


class NatsAddress(ConfigBase):
    """Where a source or sink connects: a named connection or its ``servers`` (one of them)."""

    connection: str | None = connection_field(CONNECTION_KIND)
    servers: str | None = option(
        "The NATS servers, comma-separated, such as nats://127.0.0.1:4222 (user:password@ and a token@ "
        "in a URL are secrets); for staff and the operator only (others name a connection).",
        default=None,
        secret="url",
        example="nats://127.0.0.1:4222",
        address=CONNECTION_KIND,
    )

    def validate(self, env: Environment) -> Self:
        section = self.SECTION
        if self.connection is not None and not self.connection.strip():
            raise ConfigError(f"{section}.connection", "must name a connection")
        if self.connection is not None and self.servers is not None:
            raise ConfigError(
                f"{section}.connection", f"give {section}.connection or {section}.servers, not both"
            )
        if self.servers is None:
            if self.connection is None:
                raise ConfigError(
                    f"{section}.servers", f"is required (or name a connection in {section}.connection)"
                )
            return self
        return replace(self, servers=validate_servers(self.servers, f"{section}.servers"))


class NatsSourceConfig(NatsAddress):
    """A validated ``[source]`` table of a nats_jetstream source."""

    stream: str = option("The JetStream stream to read.", example="ORDERS")
    consumer: str = option(
        '"default": one durable consumer per subject filter; the filters are the stream\'s own '
        "subjects (subjects added to the stream later become new splits), or source.subjects.",
        default=DEFAULT_CONSUMER,
        choices=(DEFAULT_CONSUMER,),
    )
    subjects: list[str] | None = option(
        "Subject filters to read instead of the stream's own subjects, which must not overlap; "
        "each is a split.",
        default=None,
        example=["orders.eu.>", "orders.us.>"],
        scoped=True,
    )
    start: str = option(
        "Where a subject filter is first read: earliest, latest, a stream sequence number (42) or an "
        "ISO-8601 time (2024-05-01T12:00:00Z).",
        default="earliest",
    )
    discovery_interval_ms: int = option(
        "How often, in milliseconds, subjects added to the stream are looked for while the flow runs.",
        default=10_000,
        minimum=100,
        maximum=86_400_000,
    )
    on_reset: str = option(
        "What a split does when the stream under its name is not the one its checkpoint belongs "
        "to (deleted and created again, or lost with its server's storage: another creation time, "
        "or a last sequence below the checkpoint): fail (the split fails naming both streams' "
        "creation times and sequences) or restart (it is read again from the new stream's first "
        "sequence as a split of its own, said as a warning and on the run; messages of the old "
        "stream not read are lost). Under restart a stream that is gone is waited for.",
        default="fail",
        choices=ON_RESET_POLICIES,
    )
    metadata: bool = option(
        "Whether each record gets the columns _subject, _seq (its stream sequence) and _ts (the "
        "message's time).",
        default=False,
    )

    def validate(self, env: Environment) -> Self:
        stream = self.stream.strip()
        check_stream_name(stream, "source.stream")
        subjects = None if self.subjects is None else check_filters(self.subjects)
        start = self.start.strip()
        start_position(start)  # refuses what is not a start
        return replace(super().validate(env), stream=stream, subjects=subjects, start=start)


class NatsSinkConfig(NatsAddress, section="sink"):
    """A validated ``[sink]`` table of a nats sink."""

    subject: str | None = option(
        "The subject every row is published to, as one JSON message.",
        default=None,
        example="orders.large",
        scoped=True,
    )
    subject_column: str | None = option(
        "Instead of subject: the column whose value is each row's subject.",
        default=None,
        example="region_subject",
    )
    stream: str | None = option(
        "The JetStream stream that captures the subjects; created (over sink.subject) if missing.",
        default=None,
        example="ORDERS_OUT",
    )
    duplicate_window: str = option(
        "How long the stream remembers message ids (Nats-Msg-Id), when the sink creates it: a repeated "
        "or crashed attempt within it adds nothing.",
        default="2 minutes",
        example="10 minutes",
    )

    def validate(self, env: Environment) -> Self:
        subject, column = self.subject, self.subject_column
        if (subject is None) == (column is None):
            raise ConfigError("sink.subject", "give sink.subject or sink.subject_column (one of them)")
        if subject is not None:
            check_subject(subject.strip(), "sink.subject", wildcards=False)
        if column is not None and not column.strip():
            raise ConfigError("sink.subject_column", "must name a column")
        if self.stream is not None:
            check_stream_name(self.stream, "sink.stream")
        duplicate_window_s(self.duplicate_window)
        return super().validate(env)


def check_stream_name(name: str, field_name: str) -> None:
    if not STREAM_NAME_RE.fullmatch(name):
        raise ConfigError(field_name, f"{name!r} is not a stream name (no spaces, dots, *, > or slashes)")


def check_subject(subject: str, field_name: str, *, wildcards: bool = True) -> None:
    """Refuses what is not a NATS subject (or filter, with ``wildcards``)."""
    tokens = subject.split(".")
    for i, token in enumerate(tokens):
        if wildcards and (token == "*" or (token == ">" and i == len(tokens) - 1)):
            continue
        if not SUBJECT_TOKEN_RE.fullmatch(token):
            what = "a subject filter such as orders.eu.>" if wildcards else "a subject such as orders.large"
            raise ConfigError(field_name, f"{subject!r} is not {what}")


def check_filters(subjects: list[str]) -> list[str]:
    """Explicit subject filters: each valid, none overlapping another (a message would be
    read by two splits)."""
    if not subjects:
        raise ConfigError("source.subjects", "lists no filter; leave it out to read the stream's subjects")
    for subject in subjects:
        check_subject(subject, "source.subjects")
    for i, first in enumerate(subjects):
        for second in subjects[i + 1 :]:
            if filters_overlap(first, second):
                raise ConfigError(
                    "source.subjects",
                    f"{first!r} and {second!r} overlap: a message on both would be read twice; "
                    "give filters that no subject matches together",
                )
    return list(subjects)


def filters_overlap(a: str, b: str) -> bool:
    """Whether some subject matches both filters (``*`` one token, ``>`` the rest)."""
    left, right = a.split("."), b.split(".")
    for i in range(max(len(left), len(right))):
        x = left[i] if i < len(left) else None
        y = right[i] if i < len(right) else None
        if x == ">" or y == ">":
            return x is not None and y is not None
        if x is None or y is None:
            return False
        if x != y and "*" not in (x, y):
            return False
    return True


def start_position(start: str) -> tuple[str, int | None]:
    """What ``start`` means: ("earliest"|"latest", None), ("seq", position before that
    sequence) or ("time", ms); ConfigError naming ``source.start`` otherwise."""
    if start in START_WORDS:
        return start, None
    if start.isdigit():
        seq = int(start)
        if seq < 1 or seq >= 2**63:
            raise ConfigError("source.start", f"{start!r}: a stream sequence starts at 1")
        return "seq", seq - 1
    try:
        return "time", parse_instant_ms(start)
    except ValueError:
        raise ConfigError(
            "source.start",
            f"{start!r} is not earliest, latest, a stream sequence (42) or an ISO-8601 time "
            "(2024-05-01T12:00:00Z)",
        ) from None


def validate_servers(servers: str, field_name: str) -> str:
    """``servers`` if each names a NATS server; the error shows them masked."""
    listed = server_list(servers)
    if not listed:
        raise ConfigError(field_name, "names no server, such as nats://127.0.0.1:4222")
    for url in listed:
        if not url.startswith(URL_SCHEMES):
            raise ConfigError(field_name, f"{mask_servers(url)!r} must start with {', '.join(URL_SCHEMES)}")
        host = url.split("://", 1)[1].rsplit("@", 1)[-1]
        if not host or host.startswith(":"):
            raise ConfigError(field_name, f"{mask_servers(url)!r} names no host")
    return ",".join(listed)


def duplicate_window_s(text: str) -> float:
    """A sink's ``duplicate_window`` in seconds."""
    try:
        ms = parse_duration_ms(text)
    except ValueError as exc:
        raise ConfigError("sink.duplicate_window", str(exc)) from None
    if ms < 1000:
        raise ConfigError("sink.duplicate_window", "must be at least 1 second")
    return ms / 1000


def nats_target(config: dict[str, Any], env: Environment, section: str) -> tuple[str, tuple[str, ...]]:
    """The servers a config connects to and the subject patterns it is limited to."""
    name = config.get("connection")
    if name:
        target = env.connection(name, f"{section}.connection")
        return target.url, target.key_patterns
    return config["servers"], ()


def sink_reads_back(source: dict[str, Any], sink_type: str, sink: dict[str, Any], env: Environment) -> str:
    """Why a nats sink would feed the flow's own source (its subject is one the source
    reads, on the same servers); empty when it does not."""
    if sink_type != "nats" or sink.get("subject") is None:
        return ""
    if (source.get("connection"), source.get("servers")) != (sink.get("connection"), sink.get("servers")):
        return ""
    filters: list[str] = source.get("subjects") or []
    if sink.get("stream") == source["stream"] or any(filters_overlap(f, sink["subject"]) for f in filters):
        return (
            f"{sink['subject']} is read by the flow's own source (stream {source['stream']}): the flow "
            "would read its own output again, for ever; publish to a subject the source does not read"
        )
    return ""
