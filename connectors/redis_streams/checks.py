"""What one look at a stream (``XINFO STREAM``) says about a split reading it: entries
trimmed before they were read, a stream that is not the one the split read (deleted and
created again, or lost with its server), the end of its input before its stop, and how
many entries its consumer group has read (Redis 7 counts entries added; Redis 6 does not)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import redis

from connectors.redis_streams.split import StreamSplit, decode_position, encode_id, position_ms
from source_support.typed_redis import sync_reply


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


#: One consumer group of an ``XINFO GROUPS`` reply: a dict (as redis-py parses it), or the
#: flat list of names and values Redis sends.
GroupInfo = Mapping[str | bytes, Any] | Sequence[Any]


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


@dataclass(frozen=True)
class StreamReplaced:
    """The stream a split read is gone (``exists`` False) or the key holds another one.

    What the old stream held past the split's position is known where a check of this
    reader saw it (``known``): ``last_id`` its last id then, ``count`` the entries after
    the position (Redis 7). Otherwise entries may have been lost, up to ``before`` (the
    new stream's first id, when it is past the position: ids of the old stream are below
    it when the server made both)."""

    why: str
    exists: bool
    known: bool
    last_id: str | None = None
    count: int | None = None
    before: str | None = None
    restarted: bool = False

    @classmethod
    def gone(
        cls,
        split: StreamSplit,
        last_info: Mapping[str, Any] | None,
        entries_read: Mapping[int, int],
        *,
        restarted: bool,
    ) -> StreamReplaced:
        return cls("the key is gone", False, *_old_end(split, last_info, entries_read), restarted=restarted)

    def on_restarted_server(self) -> StreamReplaced:
        return replace(self, restarted=True)

    @property
    def lost(self) -> bool:
        """Whether entries the split had not read are, or may be, lost: unread ones a check
        saw, or any after the position of a stream its server lost (a check only saw the
        stream as it was then). A stream deleted on purpose after the split read all that
        a check saw is not a loss to report."""
        return self.last_id is not None or self.restarted

    def lost_words(self, split: StreamSplit) -> str:
        at = decode_position(split.position)
        before = f" and before {self.before}" if self.before else ""
        if self.last_id is not None:
            many = (
                "entries" if self.count is None else f"{self.count} entr{'y' if self.count == 1 else 'ies'}"
            )
            words = f"{many} after {at} up to {self.last_id} were not read and are lost"
            return f"{words}, with any added after {self.last_id}{before}" if self.restarted else words
        if self.known and not self.restarted:
            return f"every entry up to {at} was read, and none was seen after it"
        return f"entries after {at}{before} that were not read, if there were any, are lost"

    def note(self, split: StreamSplit) -> str:
        """What happened, in words for the run's message and the split's row."""
        key, at = split.key, decode_position(split.position)
        if self.restarted:
            what = f"stream {split.key}: the source was reset (its Redis server restarted without the stream)"
        elif self.exists:
            what = f"stream {key} was deleted and created again ({self.why})"
        else:
            what = f"stream {key} was deleted while it was read; its split ends at {at}"
        then = (
            f"its new stream is read from its start as generation {split.generation + 2}"
            if self.exists
            else "it is read from its start again if it comes back"
        )
        return f"{what}; {self.lost_words(split)}; {then}"


def replaced_stream(
    split: StreamSplit,
    info: Mapping[str, Any],
    group: GroupInfo | None,
    entries_read: dict[int, int],
    last_info: Mapping[str, Any] | None,
    *,
    group_made: bool,
) -> StreamReplaced | None:
    """How the stream at the split's key shows it is not the one the split read, if it
    does: ids only grow in a stream, so a last generated id below the position; fewer
    entries ever added than the split read (Redis 7); or the flow's consumer group gone
    (it lives in the stream) from a stream whose entries all come after the position.

    A group removed by hand from a stream that still holds the position is not taken for
    a new stream; neither is one whose new entries happen to surround the position (on
    Redis 6 nothing tells that stream from the old one: documented)."""
    position = split.position
    first = info.get("first-entry")
    added, read = info.get("entries-added"), entries_read.get(position)
    why = None
    if encode_id(info["last-generated-id"]) < position:
        why = f"its last id {_text(info['last-generated-id'])} is below the checkpoint {decode_position(position)}"
    elif added is not None and read is not None and added < read:
        why = f"{added} entries were ever added to it, and the split had read {read}"
    elif group is None and (group_made or split.progressed) and (not first or encode_id(first[0]) > position):
        why = "the flow's consumer group is gone and its entries all come after the checkpoint"
    if why is None:
        return None
    before = _text(first[0]) if first and encode_id(first[0]) > position else None
    return StreamReplaced(why, True, *_old_end(split, last_info, entries_read), before=before)


def _old_end(
    split: StreamSplit, last_info: Mapping[str, Any] | None, entries_read: Mapping[int, int]
) -> tuple[bool, str | None, int | None]:
    """(known, last id not read, how many not read) of the old stream as a check last saw it."""
    if last_info is None:
        return False, None, None
    last = last_info.get("last-entry")
    if not last or encode_id(last[0]) <= split.position:
        return True, None, None
    added, read = last_info.get("entries-added"), entries_read.get(split.position)
    return True, _text(last[0]), None if added is None or read is None else max(0, added - read)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


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
    stop = split.stop_position
    if stop is None:
        return False  # a split without a stop reads on
    last_generated = encode_id(info["last-generated-id"])
    return last_generated >= stop or server_ms > position_ms(stop)


def entries_read_at(position: int, info: Mapping[str, Any], group: GroupInfo | None) -> int | None:
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


def consumer_groups(client: redis.Redis, key: str) -> list[GroupInfo]:
    """``XINFO GROUPS``: the consumer groups of a stream."""
    return sync_reply(client.xinfo_groups(key))


def group_name(group: GroupInfo) -> str:
    name = group_value(group, "name")
    return name.decode() if isinstance(name, bytes) else str(name)


def group_value(group: GroupInfo, name: str) -> Any:
    """A field of one ``XINFO GROUPS`` reply (a dict, or a flat list of names and values)."""
    if isinstance(group, Mapping):
        return group.get(name, group.get(name.encode()))
    for i in range(0, len(group) - 1, 2):
        key = group[i].decode() if isinstance(group[i], bytes) else group[i]
        if key == name:
            return group[i + 1]
    return None
