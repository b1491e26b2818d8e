"""What one look at a stream (``XINFO STREAM``) says about a split reading it: entries
trimmed before they were read, the end of its input before its stop, and how many entries
its consumer group has read (Redis 7 counts entries added; Redis 6 does not)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from connectors.redis_streams.split import StreamSplit, decode_position, encode_id, position_ms


@dataclass(frozen=True)
class LostEntries:
    """Entries trimmed after a position before they were read: ``count`` of them, up to
    ``last_position`` (the position reading resumes from), before ``next_id`` if any
    entry is left."""

    count: int
    last_position: int
    next_id: str | None

    def describe(self, position: int) -> str:
        after = f"{self.count} entr{'y' if self.count == 1 else 'ies'} after {decode_position(position)}"
        if self.next_id is not None:
            return f"{after} and before {self.next_id}"
        return f"{after} up to {decode_position(self.last_position)}"


def lost_entries(position: int, entries_read: dict[int, int], info: Mapping[str, Any]) -> LostEntries | None:
    """The entries after ``position`` that were trimmed before they were read, if any.

    A trim removes the oldest entries: when the first entry left is after ``position``,
    the entries that came before it (entries added minus the length) outnumber those
    read up to ``position`` exactly when some after ``position`` were trimmed. So it is
    known only where the count read is (``entries_read``: Redis 7, a split that read or
    whose group was moved by this source). A deletion (XDEL) after ``position`` makes
    the count unreliable: it is then forgotten until the split catches up.
    """
    read = entries_read.get(position)
    added = info.get("entries-added")
    if read is None or added is None:
        return None
    if encode_id(info.get("max-deleted-entry-id") or "0-0") > position:
        entries_read.clear()
        return None
    first = info.get("first-entry")
    if first and encode_id(first[0]) <= position:
        return None  # the oldest entry left is not after the position: no trim passed it
    lost = added - info["length"] - read
    if lost <= 0:
        return None
    if first:
        return LostEntries(lost, encode_id(first[0]) - 1, first[0].decode())
    return LostEntries(lost, encode_id(info["last-generated-id"]), None)


def resync_entries_read(position: int, entries_read: dict[int, int], info: Mapping[str, Any]) -> None:
    """Sets the count read at ``position`` to the entries added when nothing after it is
    left or was deleted (the split caught up): counts drift with deletions otherwise."""
    added = info.get("entries-added")
    last = info.get("last-entry")
    if added is None or (last and encode_id(last[0]) > position):
        return
    if encode_id(info.get("max-deleted-entry-id") or "0-0") <= position:
        entries_read[position] = added


def read_to_stop(split: StreamSplit, info: Mapping[str, Any], server_ms: int) -> bool:
    """Whether the split has read every entry up to its stop: none is left after its
    position, and none can come before the stop (new ids are above the last generated
    one, and automatic ids are above the server's time)."""
    last = info.get("last-entry")
    if last and encode_id(last[0]) > split.position:
        return False
    last_generated = encode_id(info["last-generated-id"])
    return last_generated >= split.stop_position or server_ms > position_ms(split.stop_position)


def entries_read_at(position: int, info: Mapping[str, Any], group: Any | None) -> int | None:
    """How many entries a reader at ``position`` has read (Redis 7), where that is known:
    from the flow's group if it stands at ``position``, or when the position is at the
    end or before the first entry left (entries trimmed before a split began are not
    counted as lost)."""
    if group is not None and group_value(group, "entries-read") is not None:
        delivered = group_value(group, "last-delivered-id")
        if delivered is not None and encode_id(delivered) == position:
            return int(group_value(group, "entries-read"))
    added = info.get("entries-added")
    if added is None:
        return None
    if position >= encode_id(info["last-generated-id"]):
        return added
    first = info.get("first-entry")
    if not first or position < encode_id(first[0]):
        return added - info["length"]
    return None


def group_name(group: Any) -> str:
    name = group_value(group, "name")
    return name.decode() if isinstance(name, bytes) else str(name)


def group_value(group: Any, name: str) -> Any:
    """A field of one ``XINFO GROUPS`` reply (a dict, or a flat list of names and values)."""
    if isinstance(group, dict):
        return group.get(name, group.get(name.encode()))
    for i in range(0, len(group) - 1, 2):
        key = group[i].decode() if isinstance(group[i], bytes) else group[i]
        if key == name:
            return group[i + 1]
    return None
