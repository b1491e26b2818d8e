"""A subject filter of a JetStream stream: the unit of work of the nats_jetstream source.

A position is the stream sequence of the last message read (0: none yet); reading goes
on with the next message of the filter after it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from source_support.api import SplitSerializer
from source_support.streams.split import PositionedSplit, generation_split_id


@dataclass(frozen=True)
class SubjectSplit(PositionedSplit):
    """The messages of ``stream`` on ``subject`` (a filter) after ``position``, up to
    ``stop_position`` if set. ``stop_time_ms``: a ``[stop] at`` time not yet placed on a
    sequence (the first message after it places it, for every split).

    ``created``: when the stream the split reads was created (JetStream's ``created``), so
    that a checkpoint is never applied to another stream of the same name (deleted and
    created again, or lost with its server's storage), whose sequences start over; None
    for a split stored before it was kept (its reader learns it at its first look).

    ``generation`` counts the streams that held the name while the run read the filter:
    under ``source.on_reset = "restart"`` a new stream is read from its first sequence as
    the split's next generation, a split of its own (its sequences start over, so its
    landed files and checkpoint must not mix with the old one's)."""

    stream: str
    subject: str
    position: int
    stop_position: int | None = None
    stop_time_ms: int | None = None
    created: str | None = None
    generation: int = 0

    @property
    def split_id(self) -> str:
        return generation_split_id(subject_split_id(self.stream, self.subject), self.generation)

    @property
    def stopped(self) -> bool:
        return self.stop_position is not None and self.position >= self.stop_position


def subject_split_id(stream: str, subject: str) -> str:
    return f"{stream} {subject}"


class SubjectSplitSerializer(SplitSerializer[SubjectSplit]):
    def serialize(self, split: SubjectSplit) -> dict[str, Any]:
        data: dict[str, Any] = {
            "stream": split.stream,
            "subject": split.subject,
            "position": split.position,
            "stop_position": split.stop_position,
        }
        if split.stop_time_ms is not None:
            data["stop_time_ms"] = split.stop_time_ms
        if split.created is not None:
            data["created"] = split.created
        if split.generation:
            data["generation"] = split.generation
        return data

    def deserialize(self, data: dict[str, Any]) -> SubjectSplit:
        return SubjectSplit(
            data["stream"],
            data["subject"],
            data["position"],
            data.get("stop_position"),
            data.get("stop_time_ms"),
            data.get("created"),
            data.get("generation", 0),
        )
