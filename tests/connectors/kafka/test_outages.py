"""A lost broker in the log: said once, then summed up when it answers again (issue 25: a
6 s outage made 221 ERROR lines). Against Tansu (a real Kafka-protocol broker,
tests/tansu_broker.py) stopped for a few seconds under a reader; the count of lines is
bounded, whatever the time the outage takes."""

from __future__ import annotations

import time

import pytest

from connectors.kafka.split import PartitionSplit
from tests.connectors.kafka.conftest import Topics
from tests.connectors.kafka.test_reader import reader_of
from tests.helpers import logs_of, wait_until

OUTAGE_S = 4.0


@pytest.mark.slow
def test_a_lost_broker_is_said_once_then_summed_up_when_it_answers_again(tansu, env, caplog):
    Topics(tansu).make("outage")  # empty: the broker comes back empty, and no split went back
    _, reader = reader_of(env, tansu, "outage")
    reader.handle_splits_changes([PartitionSplit("outage", p, 0) for p in range(4)], [])
    try:
        reader.fetch(100, 1.0)
        with logs_of(caplog, "connectors.kafka.librdkafka"):
            tansu.kill()
            deadline = time.monotonic() + OUTAGE_S
            while time.monotonic() < deadline:
                reader.fetch(100, 0.2)
            tansu.start()
            wait_until(
                lambda: reader.fetch(100, 0.2) is not None and "answers again" in caplog.text,
                30,
                lambda: caplog.text,
            )
            words = [r.getMessage() for r in caplog.records if r.name == "connectors.kafka.librdkafka"]
    finally:
        reader.close()

    assert len(words) == 2, words  # the first lost connection, then the summary
    assert words[0].startswith(f"Kafka at {tansu.bootstrap}: ") and "said once" in words[0]
    assert "answers again after" in words[1] and "error(s) while it was lost" in words[1]
    # What was not said was there to say: librdkafka reported more than the two lines.
    assert int(words[1].split("(")[1].split()[0]) > 2
