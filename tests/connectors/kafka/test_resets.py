"""A partition whose offsets went back below a split's checkpoint, under each
``source.on_reset`` (issue 25): ``fail`` fails the split naming the partition and both
offsets; ``restart`` ends it, says so (a warning, the split's note, the run's message) and
reads the partition's new log from its first offset as the split's next generation.

On both brokers (``broker``: librdkafka's mock cluster, then Tansu, a real Kafka-protocol
broker; tests/tansu_broker.py) a checkpoint past the partition's log end is the reset: the
mock cluster can neither delete a topic nor restart empty on its ports. On Tansu also the
issue's own case: the broker restarted empty under a reading split, the topic made again.
"""

from __future__ import annotations

import uuid

import pytest

from source_support.testing.harness import SourceHarness
from tests.connectors.kafka.conftest import Topics, kafka_source
from tests.helpers import logs_of

#: What the partition holds, and the checkpoint a split of it starts from (past its end).
HELD, CHECKPOINT = 10, 1000


def _past_the_end(broker, env, **options) -> tuple[str, SourceHarness]:
    topic = f"g{uuid.uuid4().hex[:10]}"
    topics = Topics(broker)
    topics.make(topic)
    topics.send_json(topic, 0, [{"id": i} for i in range(HELD)])
    source = kafka_source(env, broker, topic, start_offsets={f"{topic}:0": CHECKPOINT}, **options)
    return topic, SourceHarness(source, readers=1, poll_timeout_s=0.05)


@pytest.mark.slow
def test_a_checkpoint_past_the_partitions_log_fails_its_split_naming_both_offsets(broker, env):
    topic, harness = _past_the_end(broker, env)

    harness.run(until=lambda h: any(s.failed for s in h.store.state.splits.values()))

    failed = {k: s.failed for k, s in harness.store.state.splits.items() if s.failed}
    assert list(failed) == [f"{topic}:0"]
    message = failed[f"{topic}:0"]
    assert f"topic {topic} partition 0 went back below the checkpoint" in message, message
    assert f"{HELD}, the checkpoint is at offset {CHECKPOINT}" in message, message
    assert "source.on_reset is 'fail'" in message
    assert harness.records() == []


@pytest.mark.slow  # a topic made again on each broker (4-6 s in the fast lane)
def test_a_declared_restart_reads_the_new_log_from_its_first_offset_and_says_so(broker, env, caplog):
    topic, harness = _past_the_end(broker, env, on_reset="restart")

    with logs_of(caplog, "connectors.kafka"):
        harness.run(until=lambda h: len(h.records()) >= HELD)
        Topics(broker).send_json(topic, 0, [{"id": i} for i in range(HELD, HELD + 5)])
        harness.run(until=lambda h: len(h.records()) >= HELD + 5)

    assert sorted(r["id"] for r in harness.records()) == list(range(HELD + 5)), "each record once"
    splits = harness.store.state.splits
    old, new = splits[f"{topic}:0"], splits[f"{topic}:0 (generation 2)"]
    assert old.finished and not old.failed and old.position == CHECKPOINT
    said = (
        f"topic {topic} partition 0 went back below the checkpoint: "
        f"{f'its log ends at offset {HELD}' if 'log ends' in old.note else f'a fetch reports high watermark {HELD}'}"
        f", the checkpoint is at offset {CHECKPOINT}"
    )
    assert old.note.startswith(said), old.note
    assert (
        f"source.on_reset is 'restart': it is read again from offset 0, the first of its new log "
        f"(which ends at {HELD} now), as generation 2 of the split (reset 1 of this partition in this run)"
    ) in old.note
    assert old.note in caplog.text, "said as a warning too"
    assert [r.levelname for r in caplog.records if r.getMessage() == old.note] == ["WARNING"]
    assert new.position == HELD + 5 and not new.failed
    assert not any(s.failed for s in splits.values())


@pytest.mark.slow
def test_tansu_restarted_empty_fails_a_split_by_default_and_restarts_it_when_declared(tansu, env, caplog):
    topic = f"e{uuid.uuid4().hex[:10]}"
    topics = Topics(tansu)
    topics.make(topic)
    topics.send_json(topic, 0, [{"id": i} for i in range(100)])
    failing = SourceHarness(kafka_source(env, tansu, topic), readers=1, poll_timeout_s=0.05)
    restarting = SourceHarness(
        kafka_source(env, tansu, topic, on_reset="restart"), readers=1, poll_timeout_s=0.05
    )
    for harness in (failing, restarting):
        harness.run(until=lambda h: len(h.records()) == 100)

    tansu.restart()  # empty: its storage is memory
    topics = Topics(tansu)
    topics.make(topic)
    topics.send_json(topic, 0, [{"id": i} for i in range(1000, 1010)])  # below the checkpoint, 100
    with logs_of(caplog, "connectors.kafka"):
        failing.run(until=lambda h: any(s.failed for s in h.store.state.splits.values()))
        restarting.run(until=lambda h: len(h.records()) == 110)

    message = failing.store.state.splits[f"{topic}:0"].failed
    assert f"topic {topic} partition 0 went back below the checkpoint" in message
    # Told by the offsets or, first, by the topic's new id (Tansu tells topic ids).
    assert "the checkpoint is at offset 100" in message or "the checkpoint (offset 100) is of" in message
    ids = sorted(r["id"] for r in restarting.records())
    assert ids == [*range(100), *range(1000, 1010)], "the new log read whole, once"
    old = restarting.store.state.splits[f"{topic}:0"]
    assert "the checkpoint is at offset 100" in old.note or "the checkpoint (offset 100) is of" in old.note
    assert "it is read again from offset 0, the first of its new log" in old.note
    assert restarting.store.state.splits[f"{topic}:0 (generation 2)"].position == 10
    assert not any(s.failed for s in restarting.store.state.splits.values())


@pytest.mark.parametrize("on_reset", ["fail", "restart"])
@pytest.mark.slow
def test_a_topic_made_again_past_the_checkpoint_is_told_by_its_topic_id(tansu, env, on_reset):
    # Offsets cannot tell this one: the new log already reaches past the checkpoint. Tansu
    # tells topic ids (KIP-516); the mock cluster does not (there offsets are all there is).
    topic = f"i{uuid.uuid4().hex[:10]}"
    topics = Topics(tansu)
    topics.make(topic)
    topics.send_json(topic, 0, [{"id": i} for i in range(100)])
    harnesses = {
        policy: SourceHarness(
            kafka_source(env, tansu, topic, on_reset=policy), readers=1, poll_timeout_s=0.05
        )
        for policy in ("fail", on_reset)
    }
    harness = harnesses[on_reset]
    harness.run(until=lambda h: len(h.records()) == 100)
    old_id = harness.store.state.splits[f"{topic}:0"].payload.get("topic_id")

    tansu.restart()  # empty: its storage is memory
    topics = Topics(tansu)
    topics.make(topic)
    topics.send_json(topic, 0, [{"id": i} for i in range(1000, 1150)])  # 150: past the checkpoint
    harness.restart_reader(0)  # the next time slice's reader
    harness.run(
        until=lambda h: any(s.failed for s in h.store.state.splits.values()) or len(h.records()) >= 250,
        rounds=400,
    )

    old = harness.store.state.splits[f"{topic}:0"]
    said = old.failed or old.note
    assert f"topic {topic} partition 0 went back below the checkpoint: its topic's id is now " in said, said
    assert f"and the checkpoint (offset 100) is of the topic whose id was {old_id}" in said
    ids = sorted(r["id"] for r in harness.records())
    if on_reset == "fail":
        assert old.failed and ids == list(range(100)), "nothing of the new topic taken for the old one's"
    else:
        assert not old.failed and ids == [*range(100), *range(1000, 1150)], "the new log read whole, once"
        new = harness.store.state.splits[f"{topic}:0 (generation 2)"]
        assert new.payload["topic_id"] not in (None, old_id)
