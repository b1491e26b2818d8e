"""What the stream connectors share (``source_support.streams``): a split's position, the
metadata columns in the run's order, the last batch of a split, and an enumerator that
discovers on an interval and ends the input once its stop is passed."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from source_support.config import ConfigBase, option
from source_support.formats import validate_format
from source_support.registry import BuildContext, Environment
from source_support.streams.enumerator import KeyedSplitEnumerator
from source_support.streams.reader import Decoding, DecodingSplitReader
from source_support.streams.source import StreamSource
from source_support.streams.split import PositionedSplit
from tests.source_support.fakes import RecordingContext

METADATA = (pa.field("_key", pa.string()), pa.field("_ts", pa.timestamp("us", tz="UTC")))


@dataclass(frozen=True)
class TopicSplit(PositionedSplit):
    topic: str
    position: int
    stop: int | None = None

    @property
    def split_id(self) -> str:
        return f"{self.topic}!"


class Bodies:
    def empty(self) -> pa.Table:
        return pa.table({"id": pa.array([], pa.int64())})


class Reader(DecodingSplitReader[TopicSplit, Bodies]):
    metadata_fields = METADATA

    def handle_splits_changes(self, added: Any, removed: Any) -> None: ...

    def fetch(self, max_records: int, timeout_s: float) -> list[Any]:
        return []


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class TopicEnumerator(KeyedSplitEnumerator[TopicSplit]):
    """Each discovery finds the topics in ``found``; a stop means nothing found later
    qualifies once a discovery ran."""

    def __init__(self, context: RecordingContext, found: list[str], **options: Any) -> None:
        super().__init__(context, state=options.pop("state", None), **options)
        self.found = found
        self.discoveries = 0

    def start(self) -> None:
        if self._discovery_due():
            self.discoveries += 1
            for topic in self.found:
                if topic not in self.splits and topic not in self.done:
                    self.splits[topic] = {"start": 0, "owner": None}
            self.last_discovery_clock_ms = int(self.clock() * 1000)
        self._rebalance()

    def add_splits_back(self, splits: Any, subtask: int) -> None: ...

    def snapshot_state(self) -> dict[str, Any]:
        return {"splits": self.splits, "done": sorted(self.done), "last_discovery_clock_ms": 1}

    def _discovery_ran(self) -> bool:
        return self.discoveries > 0

    def _no_new_split_qualifies(self) -> bool:
        return bool(self.stop) and self._discovery_ran()

    def _new_split(self, key: str, /) -> TopicSplit:
        return TopicSplit(key, self.splits[key]["start"])

    def _split_id(self, key: str, /) -> str:
        return f"{key}!"


def test_a_positioned_split_moves_only_its_position_and_checkpoints_under_its_id():
    split = TopicSplit("orders", 3, stop=9)

    moved = split.at(7)

    assert moved == TopicSplit("orders", 7, stop=9)
    assert (moved.offset.key, moved.offset.position) == ("orders!", 7)


def test_metadata_columns_come_cast_after_the_formats_in_the_runs_order():
    run_schema = pa.schema([METADATA[1], pa.field("id", pa.int64()), METADATA[0]])
    reader = Reader(Decoding(Bodies(), metadata=True, output_schema=run_schema))
    records = pa.table({"id": pa.array([1, 2], pa.int64())})

    table = reader._with_metadata(records, [pa.array(["a", "b"]), pa.array([1_000, 2_000], pa.int64())])

    assert table.schema == run_schema
    assert table.column("_ts").to_pylist()[0].microsecond == 1_000


def test_the_last_batch_of_a_split_is_empty_and_never_ends_before_its_position():
    reader = Reader(Decoding(Bodies(), metadata=True))
    split = TopicSplit("orders", 10)

    behind, at_stop, unknown = (
        reader._end_batch(split, 5),
        reader._end_batch(split, 12),
        reader._end_batch(split),
    )

    assert [b.end.position for b in (behind, at_stop, unknown)] == [10, 12, 10]
    assert behind.finished and behind.start == split.offset and behind.end.key == "orders!"
    assert behind.records.column_names == ["id", "_key", "_ts"] and behind.records.num_rows == 0


def test_discovery_runs_on_its_interval_and_the_input_ends_only_once_every_split_is_assigned():
    context, clock = RecordingContext(parallelism=0), Clock()
    enumerator = TopicEnumerator(
        context, ["a", "b"], discovery_interval_ms=5_000, stop={"kind": "latest"}, clock=clock
    )

    enumerator.start()
    enumerator.handle_split_request(0)
    assert enumerator.pending_count() == 2 and not enumerator.is_exhausted()
    assert context.no_more == []

    context.parallelism = 2
    enumerator.add_reader(1)
    enumerator.handle_split_request(0)

    assert sorted(s.split_id for _, s in context.assigned) == ["a!", "b!"]
    assert enumerator.is_exhausted() and context.no_more == [0]


def test_without_a_stop_discovery_goes_on_every_interval_and_never_ends_the_input():
    context, clock = RecordingContext(parallelism=1), Clock()
    enumerator = TopicEnumerator(context, ["a"], discovery_interval_ms=5_000, stop={}, clock=clock)

    enumerator.start()
    clock.now += 4
    enumerator.start()
    assert enumerator.discoveries == 1

    enumerator.found.append("b")
    clock.now += 1
    enumerator.start()

    assert enumerator.discoveries == 2
    assert [s.split_id for _, s in context.assigned] == ["a!", "b!"]
    enumerator.handle_split_request(0)
    assert not enumerator.is_exhausted() and context.no_more == []


class _Plain(ConfigBase):
    """A stream source's table with none of start, discovery_interval_ms or metadata (an MQTT
    topic has no place to start from and no splits to discover)."""

    topic: str = option("The topic.", example="sensors")


def test_a_stream_source_config_without_start_discovery_or_metadata_reads_with_the_defaults(tmp_path: Path):
    config = _Plain(topic="sensors")
    fmt = validate_format({"type": "json", "schema": "id BIGINT"})
    context = BuildContext(env=Environment(allowed_roots=(tmp_path,), base_dir=tmp_path), batch_size=10)

    reading = StreamSource.reading(config, fmt, context)

    assert (reading.start, reading.discovery_interval_ms, reading.metadata) == ("", 10_000, False)
    schema = pa.schema([("id", pa.int64())])
    assert reading.schema == schema
    assert StreamSource.output_schema(config, schema) == schema
