"""Which bounded runs publish their landed files without Spark (``runs.landed``), and what
the files sink stages for them (``connectors.files.landed``)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from connectors.files.landed import write_landed_parquet
from dataflow.services.runs.landed import landed_copy_applies, transform_is_identity
from source_support.environment import Environment

SCHEMA = pa.schema([("id", pa.int64()), ("ts", pa.timestamp("us", tz="UTC")), ("sensor", pa.string())])


@pytest.mark.parametrize(
    "sql", ["SELECT * FROM source", "select *  from   source", "SELECT * FROM source -- all of it"]
)
def test_the_identity_is_recognised_in_any_case_and_spacing(sql):
    assert transform_is_identity(sql)


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM source WHERE id > 1",
        "SELECT id, ts, sensor FROM source",
        "SELECT DISTINCT * FROM source",
        "SELECT * FROM source LIMIT 3",
        "SELECT * FROM source ORDER BY id",
        "SELECT *, 1 AS one FROM source",
        "SELECT * FROM",
    ],
)
def test_any_other_query_is_not_the_identity(sql):
    assert not transform_is_identity(sql)


def _spec(**changes):
    spec = {
        "transform_sql": "SELECT * FROM source",
        "sink_type": "parquet",
        "sink_config": {"path": "/data/out", "compression": "snappy", "partition_by": []},
    }
    return {**spec, **changes}


def test_an_identity_run_into_a_local_parquet_sink_needs_no_spark():
    assert landed_copy_applies(_spec())


@pytest.mark.parametrize(
    "changes",
    [
        {"transform_sql": "SELECT id FROM source"},
        {"sink_type": "csv", "sink_config": {"path": "/data/out", "compression": "none", "partition_by": []}},
        {"sink_config": {"path": "/data/out", "compression": "snappy", "partition_by": ["sensor"]}},
        {"sink_config": {"path": "s3://bucket/out", "compression": "snappy", "partition_by": []}},
        {"replay": {"dead_letters": [1]}},
    ],
    ids=["a-query", "csv-sink", "partition-by", "s3-path", "replay"],
)
def test_other_runs_go_through_spark(changes):
    assert not landed_copy_applies(_spec(**changes))


def _landed(tmp_path: Path, name: str, ids: range, *, compression="snappy", schema=SCHEMA) -> str:
    table = pa.table(
        {
            "id": pa.array(list(ids), pa.int64()),
            "ts": pa.array([i * 1_000_000 for i in ids], pa.timestamp("us", tz="UTC")),
            "sensor": pa.array([f"s{i % 3}" for i in ids]),
        }
    ).select(schema.names)
    path = tmp_path / "landing" / f"{name}.parquet"
    path.parent.mkdir(exist_ok=True)
    pq.write_table(table.cast(schema), path, compression=compression)
    return str(path)


def _write(tmp_path: Path, paths: list[str], *, compression="snappy", publish=None) -> tuple[bool, list[int]]:
    staged = []

    def accept(rows, swap):
        staged.append(rows)
        swap()
        return True

    env = Environment(allowed_roots=(tmp_path / "out",), base_dir=tmp_path)
    config = {"path": str(tmp_path / "out" / "sink"), "compression": compression, "partition_by": []}
    done = write_landed_parquet(
        paths, SCHEMA, config, attempt_key="run1-1", publish=publish or accept, env=env
    )
    return done, staged


def _rows(path: Path) -> list[tuple]:
    table = pq.read_table(path)
    return sorted(zip(*(table[c].to_pylist() for c in SCHEMA.names), strict=True))


def test_landed_files_in_the_sinks_codec_are_linked_into_the_sink(tmp_path):
    (tmp_path / "out").mkdir()
    paths = [_landed(tmp_path, "a", range(0, 10)), _landed(tmp_path, "b", range(10, 25))]

    done, staged = _write(tmp_path, paths)

    assert done and staged == [25]
    sink = tmp_path / "out" / "sink"
    files = sorted(sink.iterdir())
    assert [f.name for f in files] == ["part-00000.snappy.parquet", "part-00001.snappy.parquet"]
    assert [f.stat().st_ino for f in files] == [Path(p).stat().st_ino for p in paths]
    assert _rows(sink) == _rows(Path(paths[0]).parent)
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["sink"]  # no staging left


def test_landed_files_of_another_codec_or_column_order_are_rewritten(tmp_path):
    (tmp_path / "out").mkdir()
    reordered = pa.schema([SCHEMA.field("sensor"), SCHEMA.field("id"), SCHEMA.field("ts")])
    paths = [_landed(tmp_path, "a", range(0, 10)), _landed(tmp_path, "b", range(10, 20), schema=reordered)]

    done, _ = _write(tmp_path, paths, compression="zstd")

    assert done
    sink = tmp_path / "out" / "sink"
    for file in sink.iterdir():
        metadata = pq.ParquetFile(file).metadata
        assert metadata.row_group(0).column(0).compression == "ZSTD"
        assert pq.read_schema(file).remove_metadata().equals(SCHEMA)
    assert _rows(sink) == _rows(Path(paths[0]).parent)


def test_a_run_that_landed_nothing_publishes_an_empty_file_of_its_schema(tmp_path):
    (tmp_path / "out").mkdir()

    done, staged = _write(tmp_path, [])

    assert done and staged == [0]
    assert pq.read_table(tmp_path / "out" / "sink").schema.remove_metadata().equals(SCHEMA)


def test_an_attempt_the_fence_refuses_leaves_the_sink_as_it_was(tmp_path):
    sink = tmp_path / "out" / "sink"
    sink.mkdir(parents=True)
    (sink / "old.parquet").write_bytes(b"the previous run's")

    done, _ = _write(tmp_path, [_landed(tmp_path, "a", range(5))], publish=lambda rows, swap: False)

    assert not done
    assert [p.name for p in sink.iterdir()] == ["old.parquet"]
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["sink"]
