"""Dead letters discarded, and replayed into the flow's sink once the format is fixed.

The replays run end to end: a real Celery worker, PostgreSQL, Redis and Spark; the sink is
read with pandas as a user would. The refusals need only the database.
"""

from __future__ import annotations

import pandas as pd
import pytest

from dataflow.models import DeadLetter, FlowRun, RunStatus
from dataflow.services.dead_letters import dead_letters_discard, dead_letters_replay
from dataflow.services.errors import FlowStateError
from dataflow.services.flows import flow_apply, flow_start, flow_stop
from source_support.errors import ConfigError
from tests.factories import DataFlowFactory, DeadLetterFactory, FlowRunFactory
from tests.helpers import Beat, run_flow, wait_for_run

#: temperature is read as a whole number: the rows with a decimal one are dead letters.
STRICT = "id BIGINT, sensor STRING, temperature BIGINT"
FIXED = "id BIGINT, sensor STRING, temperature DOUBLE"
BAD_IDS = (3, 9, 15)
#: The flow's transform: the temperature as the sink keeps it, whatever the schema read.
AS_DOUBLE = "SELECT id, sensor, CAST(temperature AS DOUBLE) AS temperature FROM source"


def _readings(path) -> dict[int, tuple[str, float]]:
    """A CSV of readings whose header has the columns in another order than the schema;
    the rows of ``BAD_IDS`` have a decimal temperature. Returns id -> (sensor, temperature)."""
    rows = {i: (f"s{i % 3}", i + 0.5 if i in BAD_IDS else float(i)) for i in range(20)}
    lines = ["temperature,id,sensor"]
    lines += [f"{t:g},{i},{s}" for i, (s, t) in rows.items()]
    path.write_text("\n".join(lines) + "\n")
    return rows


def _doc(dirs, schema: str = STRICT, sql: str | None = None) -> dict:
    return {
        "flow": {"name": "readings", "parallelism": 2, "poll_interval_ms": 50, "skip_errors": True},
        "source": {"type": "files", "path": str(dirs.data / "*.csv")},
        "format": {"type": "csv", "schema": schema},
        "transform": {"sql": sql or AS_DOUBLE},
        "sink": {"type": "parquet", "path": str(dirs.out / "sink")},
    }


def _sink(dirs) -> dict[int, tuple[str, float]]:
    frame = pd.read_parquet(dirs.out / "sink")
    assert not frame["id"].duplicated().any(), frame[frame["id"].duplicated(keep=False)]
    return {int(r.id): (r.sensor, r.temperature) for r in frame.itertuples()}


def _replay(flow, **chosen) -> FlowRun:
    with Beat():
        return wait_for_run(dead_letters_replay(flow=flow, **chosen))


@pytest.fixture()
def first_run(worker, dirs):
    """A succeeded run of 20 readings whose 3 decimal temperatures are dead letters."""
    rows = _readings(dirs.data / "readings.csv")
    run = run_flow(_doc(dirs))
    assert run.status == RunStatus.SUCCEEDED, run.message
    assert DeadLetter.objects.filter(run=run).count() == 3
    return run, rows


@pytest.mark.slow
def test_a_replay_after_fixing_the_schema_adds_the_records_and_removes_their_dead_letters(first_run, dirs):
    run, rows = first_run
    assert _sink(dirs) == {i: row for i, row in rows.items() if i not in BAD_IDS}
    flow, _ = flow_apply(spec=_doc(dirs, schema=FIXED))

    replay = _replay(flow, run_id=run.pk)

    assert replay.status == RunStatus.SUCCEEDED, replay.message
    assert (replay.trigger, replay.records_read, replay.errors_count, replay.rows_written) == (
        "replay",
        3,
        0,
        3,
    )
    assert _sink(dirs) == rows  # the 17 of the first run and the 3 replayed, each once
    assert not DeadLetter.objects.filter(flow=flow).exists()


@pytest.mark.slow
def test_replayed_records_that_fail_again_stay_dead_letters_of_the_replay_run(first_run, dirs):
    run, rows = first_run
    before = {d.raw for d in DeadLetter.objects.filter(run=run)}

    replay = _replay(run.flow, run_id=run.pk)

    assert replay.status == RunStatus.SUCCEEDED, replay.message
    assert (replay.records_read, replay.errors_count, replay.rows_written) == (0, 3, 0)
    letters = DeadLetter.objects.filter(flow=run.flow)
    assert {d.raw for d in letters} == before
    assert {d.run_id for d in letters} == {replay.pk}
    assert all("temperature" in d.error and "BIGINT" in d.error for d in letters), [d.error for d in letters]
    assert _sink(dirs) == {i: row for i, row in rows.items() if i not in BAD_IDS}


@pytest.mark.slow
def test_a_replay_of_some_ids_leaves_the_others(first_run, dirs):
    run, rows = first_run
    flow, _ = flow_apply(spec=_doc(dirs, schema=FIXED))
    letters = list(DeadLetter.objects.filter(run=run).order_by("line"))

    replay = _replay(flow, ids=[letters[0].pk])

    assert replay.status == RunStatus.SUCCEEDED, replay.message
    assert set(_sink(dirs)) == set(rows) - set(BAD_IDS[1:])
    assert list(DeadLetter.objects.filter(flow=flow).order_by("line")) == letters[1:]


# Refusals and bookkeeping, without a worker.


@pytest.fixture()
def letters(dirs, db):
    """The flow of ``_doc`` with a succeeded run that left 3 dead letters (rows written by hand)."""
    _readings(dirs.data / "readings.csv")
    flow = DataFlowFactory(
        name="readings",
        parallelism=2,
        skip_errors=True,
        source_path=str(dirs.data / "*.csv"),
        schema=STRICT,
        sql=AS_DOUBLE,
        sink_path=str(dirs.out / "sink"),
    )
    run = FlowRunFactory(flow=flow)
    return flow, run, DeadLetterFactory.create_batch(3, run=run)


def test_discard_deletes_the_dead_letters_named_or_of_a_run(letters):
    flow, run, (first, *rest) = letters

    assert dead_letters_discard(flow=flow, ids=[first.pk]) == 1
    assert dead_letters_discard(flow=flow, run_id=run.pk) == 2
    assert not DeadLetter.objects.exists()


def test_ids_of_another_flow_are_refused_by_name(letters, dirs):
    flow, _, _ = letters
    theirs = DeadLetterFactory(run__flow__name="other")

    for action in (dead_letters_discard, dead_letters_replay):
        with pytest.raises(ConfigError, match=rf"ids: {theirs.pk} are not dead letters of flow 'readings'"):
            action(flow=flow, ids=[theirs.pk])
    assert DeadLetter.objects.count() == 4


def test_a_replay_with_nothing_to_replay_is_refused(letters):
    flow, run, _ = letters

    with pytest.raises(ConfigError, match="ids: names no dead letter"):
        dead_letters_replay(flow=flow, ids=[])
    with pytest.raises(ConfigError, match="ids: name the dead letters"):
        dead_letters_replay(flow=flow)
    assert not FlowRun.objects.filter(trigger="replay").exists()


def test_a_replay_while_the_flow_runs_is_refused(letters):
    flow, run, _ = letters
    flow_start(flow=flow)

    with pytest.raises(FlowStateError, match="is running"):
        dead_letters_replay(flow=flow, run_id=run.pk)


def test_a_replay_into_an_aggregate_is_refused(letters, dirs):
    flow, run, _ = letters
    flow, _ = flow_apply(spec=_doc(dirs, sql="SELECT sensor, count(*) AS n FROM source GROUP BY sensor"))

    with pytest.raises(ConfigError, match="transform.sql: .*start the flow again"):
        dead_letters_replay(flow=flow, run_id=run.pk)


def test_dead_letters_of_a_run_whose_rows_a_later_run_replaced_are_refused(letters):
    flow, run, _ = letters
    later = FlowRunFactory(flow=flow)

    with pytest.raises(
        ConfigError, match=rf"run: the dead letters of run {run.pk} .*run {later.pk} wrote it"
    ):
        dead_letters_replay(flow=flow, run_id=run.pk)


def test_a_stopped_replay_leaves_the_dead_letters_as_they_were(letters):
    flow, run, created = letters
    replay = dead_letters_replay(flow=flow, run_id=run.pk)
    assert replay.status == RunStatus.TRANSFORMING

    with pytest.raises(FlowStateError, match="replay of the dead letters"):
        dead_letters_discard(flow=flow, run_id=run.pk)
    flow_stop(flow=flow)

    assert list(DeadLetter.objects.filter(flow=flow, run=run)) == created
