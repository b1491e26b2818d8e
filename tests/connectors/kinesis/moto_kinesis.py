"""``python -m moto.server`` with Kinesis resharding as AWS documents it, for the tests.

moto 5.2.1 is the stand-in for Kinesis here (AWS cannot be reached), but its resharding
differs from the service's in four ways that matter to a reader of shards, so this
launcher corrects them before it starts the server (nothing else is changed):

- ``SplitShard`` moves the parent's records into the shards that then hold their hash
  keys, and ``MergeShards`` copies both parents' records into the child: in Kinesis the
  records stay in the closed parents and the children start empty.
- a record put after a reshard may land in the closed parent (the first shard whose hash
  range holds its key): in Kinesis only open shards take records.
- ``GetRecords`` on a closed shard read to its end still returns a ``NextShardIterator``:
  in Kinesis it returns none, which is how a reader knows the shard ended (SHARD_END).

Run as ``python tests/connectors/kinesis/moto_kinesis.py -H 127.0.0.1 -p PORT``.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from moto.kinesis.models import KinesisBackend, Shard, Stream
from moto.kinesis.utils import decompose_shard_iterator
from moto.server import main
from moto.utilities.utils import md5_hash


def _shard_for_key(self: Stream, partition_key: str, explicit_hash_key: str) -> Shard | None:
    key = (
        int(explicit_hash_key) if explicit_hash_key else int(md5_hash(partition_key.encode()).hexdigest(), 16)
    )
    for shard in self.shards.values():
        if shard.is_open and shard.starting_hash <= key <= shard.ending_hash:
            return shard
    return None


def _split_shard(self: Stream, shard_to_split: str, new_starting_hash_key: str) -> None:
    parent = self.shards[shard_to_split]
    kept = parent.records
    parent.records = OrderedDict()  # moto's split re-puts them; none should move
    _original_split(self, shard_to_split, new_starting_hash_key)
    for child in self.shards.values():
        if child.parent == shard_to_split:
            child.records = OrderedDict()
    parent.records = kept


def _merge_shards(self: Stream, shard_to_merge: str, adjacent_shard_to_merge: str) -> None:
    _original_merge(self, shard_to_merge, adjacent_shard_to_merge)
    for shard in self.shards.values():
        if shard.parent == shard_to_merge and shard.adjacent_parent == adjacent_shard_to_merge:
            shard.records = OrderedDict()


def _get_records(self: KinesisBackend, stream_arn: str | None, shard_iterator: str, limit: int | None) -> Any:
    next_iterator, records, behind = _original_get_records(self, stream_arn, shard_iterator, limit)
    stream_name, shard_id, _ = decompose_shard_iterator(shard_iterator)
    shard = self.describe_stream(stream_arn=stream_arn, stream_name=stream_name).get_shard(shard_id)
    last = int(decompose_shard_iterator(next_iterator)[2])
    if not shard.is_open and last >= shard.get_max_sequence_number():
        return None, records, behind
    return next_iterator, records, behind


_original_split = Stream.split_shard
_original_merge = Stream.merge_shards
_original_get_records = KinesisBackend.get_records
Stream.get_shard_for_key = _shard_for_key  # type: ignore[method-assign]
Stream.split_shard = _split_shard  # type: ignore[method-assign]
Stream.merge_shards = _merge_shards  # type: ignore[method-assign]
KinesisBackend.get_records = _get_records  # type: ignore[method-assign]

if __name__ == "__main__":
    main()
