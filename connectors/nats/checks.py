"""What a look at a stream says about a split reading it: a stream that is not the one the
split's checkpoint belongs to (deleted and created again, or lost with its server's
storage: its sequences start over), and messages discarded by the stream's limits
(``max_msgs``, ``max_bytes``, ``max_age``) before the split read them."""

from __future__ import annotations

from dataclasses import dataclass

from connectors.nats.jetstream import StreamSeen
from connectors.nats.split import SubjectSplit


def reset_reason(split: SubjectSplit, seen: StreamSeen) -> str:
    """Why the stream now under the split's name is not the one its checkpoint belongs to
    (another creation time, or a last sequence below the checkpoint); empty if it is."""
    if split.created and seen.created and seen.created != split.created:
        return (
            f"stream {split.stream} was created at {seen.created}, and the checkpoint of subject filter "
            f"{split.subject} (sequence {split.position}) is of the stream created at {split.created}"
        )
    if seen.last_seq < split.position:
        return (
            f"the last sequence of stream {split.stream} is {seen.last_seq}, below the checkpoint of "
            f"subject filter {split.subject} (sequence {split.position}): it is another stream"
        )
    return ""


def reset_failure(split: SubjectSplit, seen: StreamSeen, why: str) -> str:
    """The split's error when its stream was replaced."""
    held = (
        f"its messages {seen.first_seq} to {seen.last_seq}"
        if seen.last_seq >= seen.first_seq and seen.last_seq
        else "its messages"
    )
    return (
        f"{why}. Its sequences start over, so the checkpoint cannot be applied to it and "
        f"{held} are not read: start a new run to read it"
    )


@dataclass(frozen=True)
class Discarded:
    """Messages of the stream after the split's position that the stream discarded before
    the split read them: sequences ``first`` to ``last``. ``certain``: the split's filter
    is the stream's only subject, so each was the split's; otherwise only those on its
    filter among them were."""

    first: int
    last: int
    certain: bool

    def describe(self, split: SubjectSplit) -> str:
        count = self.last - self.first + 1
        what = f"message{'s' if count != 1 else ''} {self.first} to {self.last} of stream {split.stream}"
        why = "were discarded by its limits (max_msgs, max_bytes or max_age) before they were read"
        if self.certain:
            return f"{what} ({count}) {why}"
        return f"{what} {why}: those on {split.subject} among them are lost"


def discarded(split: SubjectSplit, scanned: int, seen: StreamSeen) -> Discarded | None:
    """The messages after what the split has read (its position, or ``scanned``: how far
    its consumer is known to have found every message of its filter) that are no longer
    in the stream, if any. A split that has read nothing yet starts at the stream's first
    message, so nothing before it is counted."""
    read_to = max(split.position, scanned)
    if not split.position or seen.first_seq <= read_to + 1:
        return None
    subjects = seen.info.config.subjects or []
    return Discarded(read_to + 1, seen.first_seq - 1, certain=subjects == [split.subject])


def discards_by_limits(seen: StreamSeen) -> bool:
    """Whether the stream may discard messages nobody read: it keeps them under limits
    (``max_msgs``, ``max_bytes``, ``max_age``, ``max_msgs_per_subject``) or by interest
    (a work queue or interest stream removes what its consumers acknowledged)."""
    config = seen.info.config
    retention = getattr(config.retention, "value", config.retention)
    limited = (
        (config.max_msgs or -1) > 0
        or (config.max_bytes or -1) > 0
        or (config.max_age or 0) > 0
        or (config.max_msgs_per_subject or -1) > 0
    )
    return limited or retention not in (None, "limits")
