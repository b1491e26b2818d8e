"""The Kinesis calls the source makes, over one boto3 client per endpoint and process."""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import botocore.exceptions

from connectors.aws.config import AwsTarget
from connectors.aws.session import aws_client, error_code
from connectors.kinesis.split import AFTER_SEQUENCE_NUMBER, AT_TIMESTAMP, Anchor

if TYPE_CHECKING:
    from mypy_boto3_kinesis import KinesisClient
    from mypy_boto3_kinesis.type_defs import GetRecordsOutputTypeDef

#: GetRecords returns at most this many records per call (Kinesis's own limit).
MAX_RECORDS_PER_CALL = 10_000
#: Error codes that say "slow down": the call is tried again later, from the same place.
THROTTLED = frozenset(
    {"ProvisionedThroughputExceededException", "LimitExceededException", "KMSThrottlingException"}
)
#: The iterator is older than five minutes: a new one is made from the last record read.
EXPIRED = "ExpiredIteratorException"


@dataclass(frozen=True)
class ShardInfo:
    """A shard as ListShards describes it: its parents (one for a split, two for a
    merge) and whether it is closed (a reshard made children; it takes no more records)."""

    shard_id: str
    parents: tuple[str, ...]
    closed: bool


_clients: dict[tuple[int, AwsTarget], KinesisClient] = {}
_clients_lock = threading.Lock()


def shared_client(target: AwsTarget) -> KinesisClient:
    """One Kinesis client per target in each process (a forked worker makes its own)."""
    key = (os.getpid(), target)
    with _clients_lock:
        client = _clients.get(key)
        if client is None:
            # One try per call: the reader backs off by itself (throttling, an endpoint away)
            # and the enumerator tries again at its next tick.
            client = _clients[key] = aws_client(target, "kinesis", max_attempts=1)
        return client


def list_shards(client: KinesisClient, stream: str) -> list[ShardInfo]:
    """Every shard of ``stream`` still within its retention, parents before children."""
    shards: list[ShardInfo] = []
    page = client.list_shards(StreamName=stream)
    while True:
        for shard in page.get("Shards", []):
            parents = tuple(p for p in (shard.get("ParentShardId"), shard.get("AdjacentParentShardId")) if p)
            closed = "EndingSequenceNumber" in shard.get("SequenceNumberRange", {})
            shards.append(ShardInfo(shard["ShardId"], parents, closed))
        token = page.get("NextToken")
        if not token:
            return shards
        page = client.list_shards(NextToken=token)


def shard_iterator(client: KinesisClient, stream: str, shard_id: str, anchor: Anchor) -> str:
    """An iterator at ``anchor`` (its first record is the one after the anchor's position)."""
    args: dict[str, Any] = {"StreamName": stream, "ShardId": shard_id, "ShardIteratorType": anchor.kind}
    if anchor.kind == AFTER_SEQUENCE_NUMBER:
        args["StartingSequenceNumber"] = anchor.value
    elif anchor.kind == AT_TIMESTAMP:
        args["Timestamp"] = datetime.fromtimestamp(int(anchor.value) / 1000, UTC)
    return client.get_shard_iterator(**args)["ShardIterator"]


def get_records(client: KinesisClient, iterator: str, limit: int) -> GetRecordsOutputTypeDef:
    return client.get_records(ShardIterator=iterator, Limit=max(1, min(limit, MAX_RECORDS_PER_CALL)))


def next_iterator(answer: GetRecordsOutputTypeDef) -> str | None:
    """The iterator after ``answer``; None once a closed shard is read to its end (the
    stubs call it always there; Kinesis leaves it out at SHARD_END)."""
    return answer.get("NextShardIterator") or None


def is_throttled(exc: BaseException) -> bool:
    return error_code(exc) in THROTTLED


def is_expired(exc: BaseException) -> bool:
    return error_code(exc) == EXPIRED


def is_not_found(exc: BaseException) -> bool:
    return isinstance(exc, botocore.exceptions.ClientError) and error_code(exc) == "ResourceNotFoundException"
