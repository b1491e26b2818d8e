"""The Kafka enumerator over brokers as a fake (``KafkaMetadata``): the mock cluster cannot
add partitions to a topic or look offsets up by time, so what discovery and starts do with
them is checked here; the kit and the reader tests run against the mock cluster."""

from __future__ import annotations

from collections import Counter

from connectors.kafka.enumerator import PartitionEnumerator
from tests.source_support.fakes import RecordingContext


class FakeBrokers:
    """Topics with partition counts, each partition's watermarks, offsets by time."""

    def __init__(self, partitions: dict[str, int], low: int = 0, high: int = 10) -> None:
        self.counts = dict(partitions)
        self.low, self.high = low, high
        self.by_time: dict[tuple[str, int], int | None] = {}

    def partitions(self, timeout_s: float = 10.0) -> dict[str, int]:
        return dict(self.counts)

    def watermarks(self, topic: str, partition: int) -> tuple[int, int]:
        return self.low, self.high

    def ends(self, partitions):
        return {key: self.watermarks(*key) for key in partitions}

    def offset_for_time(self, topic: str, partition: int, time_ms: int) -> int | None:
        return self.by_time.get((topic, partition))

    def topic_ids(self, topics) -> dict[str, str]:
        return {}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def enumerator(context, brokers, *, state=None, clock=None, **options):
    settings = {
        "topics": None,
        "topic_pattern": "orders.*",
        "start": "earliest",
        "start_offsets": None,
        "stop_offsets": None,
        "discovery_interval_ms": 1000,
        "stop": {},
        **options,
    }
    return PartitionEnumerator(context, brokers=brokers, state=state, clock=clock or Clock(), **settings)


def starts(context) -> dict[str, tuple[int, int | None]]:
    return {s.split_id: (s.position, s.stop_offset) for _, s in context.assigned}


def test_new_partitions_and_new_matching_topics_become_splits_read_from_their_start():
    brokers, clock, context = FakeBrokers({"orders.eu": 2, "other": 1}, low=3), Clock(), RecordingContext(2)
    first = enumerator(context, brokers, clock=clock, start="latest")
    first.start()
    assert starts(context) == {"orders.eu:0": (10, None), "orders.eu:1": (10, None)}

    brokers.counts.update({"orders.eu": 3, "orders.us": 1})
    clock.now += 2
    again = enumerator(context, brokers, clock=clock, start="latest", state=first.snapshot_state())
    again.start()

    assert starts(context)["orders.eu:2"] == (3, None)  # found later: from its first offset
    assert starts(context)["orders.us:0"] == (3, None)
    assert "other:0" not in starts(context)


def test_splits_are_balanced_and_stay_with_their_reader():
    brokers, context = FakeBrokers({"orders": 6}), RecordingContext(3)
    first = enumerator(context, brokers)
    first.start()
    owners = {s.split_id: subtask for subtask, s in context.assigned}
    assert sorted(Counter(owners.values()).values()) == [2, 2, 2]

    again = enumerator(context, brokers, state=first.snapshot_state())
    again.start()
    again.handle_split_request(0)
    assert len(context.assigned) == 6 and context.revoked == []  # nothing moved


def test_start_offsets_and_a_start_time_resolve_per_partition():
    brokers, context = FakeBrokers({"orders": 3}, low=2), RecordingContext(1)
    brokers.by_time = {("orders", 0): 7, ("orders", 1): None}
    enumerator(
        context, brokers, start="2024-05-01T12:00:00Z", start_offsets={"orders:2": 5}, topics=["orders"]
    ).start()
    # The first record at or after the time; none yet: the end; named: its offset.
    assert starts(context) == {"orders:0": (7, None), "orders:1": (10, None), "orders:2": (5, None)}


def test_a_latest_stop_fixes_each_end_and_later_partitions_are_never_read():
    brokers, clock, context = FakeBrokers({"orders": 2}), Clock(), RecordingContext(1)
    first = enumerator(context, brokers, clock=clock, stop={"at": "latest", "kind": "latest"})
    first.start()
    assert starts(context) == {"orders:0": (0, 10), "orders:1": (0, 10)}
    assert first.is_exhausted()

    brokers.counts["orders"] = 3
    clock.now += 5
    again = enumerator(context, brokers, clock=clock, stop={"kind": "latest"}, state=first.snapshot_state())
    again.start()
    assert "orders:2" not in starts(context)


def test_stop_offsets_bound_the_named_partitions_and_the_rest_at_their_end():
    brokers, context = FakeBrokers({"orders": 3}), RecordingContext(1)
    enumerator(context, brokers, stop_offsets={"orders:0": 4, "orders:1": 0}).start()
    # orders:1 stops before it starts: done at once, never assigned.
    assert starts(context) == {"orders:0": (0, 4), "orders:2": (0, 10)}


def test_a_split_given_back_is_assigned_again_at_its_position():
    brokers, context = FakeBrokers({"orders": 1}), RecordingContext(1)
    first = enumerator(context, brokers)
    first.start()
    (_, split), *_ = context.assigned
    context.held.clear()
    again = enumerator(context, brokers, state=first.snapshot_state())
    again.add_splits_back([split.at(8)], 0)
    assert context.assigned[-1][1].position == 8
