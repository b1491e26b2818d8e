"""Directory sinks without Spark: the atomic commit, row counting, and config validation.

``commit_directory`` takes any ``write_to(staging)`` callable, so plain Python writers stand in
for Spark's; Spark itself is exercised by the end-to-end tests.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from connectors.files.sink import FILE_SINKS, append_epoch, commit_directory, count_rows
from source_support.errors import ConfigError
from source_support.registry import Environment

VALIDATORS = {sink.type: sink.validate for sink in FILE_SINKS}


def write_parts(parts: dict[str, bytes]):
    """A write_to that writes ``parts`` (relative path -> bytes) into the staging directory."""

    def write_to(staging: str) -> None:
        for name, content in parts.items():
            path = Path(staging) / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content)

    return write_to


def tree(directory: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()
    }


@pytest.fixture()
def out(tmp_path) -> Path:
    out = tmp_path / "out"
    out.mkdir()
    return out.resolve()


@pytest.fixture()
def env(tmp_path, out) -> Environment:
    return Environment(allowed_roots=(out,), base_dir=tmp_path)


# commit_directory


def swap_and_publish(rows: int, swap) -> bool:
    swap()
    return True


def count_files(staging: Path) -> int:
    return sum(1 for p in staging.rglob("*") if p.is_file() and not p.name.startswith("_"))


def commit(target: Path, write_to, attempt_key: str, publish=swap_and_publish) -> bool:
    return commit_directory(target, write_to, count_files, attempt_key=attempt_key, publish=publish)


def test_commit_creates_the_target_with_what_was_written(out):
    target = out / "result"

    commit(target, write_parts({"part-0.csv": b"1\n", "_SUCCESS": b""}), "r1-1")

    assert tree(target) == {"part-0.csv": b"1\n", "_SUCCESS": b""}
    assert sorted(p.name for p in out.iterdir()) == ["result"]


def test_commit_replaces_the_whole_previous_target(out):
    target = out / "result"
    commit(target, write_parts({"old-0.csv": b"old\n", "old-1.csv": b"old\n"}), "r1-1")

    commit(target, write_parts({"new-0.csv": b"new\n"}), "r2-1")

    assert tree(target) == {"new-0.csv": b"new\n"}
    assert sorted(p.name for p in out.iterdir()) == ["result"]


def test_commit_creates_missing_parent_directories(out):
    target = out / "a" / "b" / "result"

    commit(target, write_parts({"x": b"1"}), "r1-1")

    assert tree(target) == {"x": b"1"}


def test_a_failing_write_leaves_the_previous_target_intact(out):
    target = out / "result"
    commit(target, write_parts({"part-0.csv": b"kept\n"}), "r1-1")

    def half_written(staging: str) -> None:
        write_parts({"part-0.csv": b"partial"})(staging)
        raise RuntimeError("executor lost")

    with pytest.raises(RuntimeError, match="executor lost"):
        commit(target, half_written, "r2-1")

    assert tree(target) == {"part-0.csv": b"kept\n"}


def test_a_failing_first_write_creates_no_target(out):
    def failing(staging: str) -> None:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        commit(out / "result", failing, "r1-1")

    assert not (out / "result").exists()


def test_a_rerun_after_a_failed_write_replaces_its_leftover_staging(out):
    target = out / "result"

    def half_written(staging: str) -> None:
        write_parts({"stale.csv": b"half"})(staging)
        raise RuntimeError("crash")

    with pytest.raises(RuntimeError):
        commit(target, half_written, "r1-1")
    commit(target, write_parts({"part-0.csv": b"done\n"}), "r1-2")

    assert tree(target) == {"part-0.csv": b"done\n"}
    assert sorted(p.name for p in out.iterdir()) == ["result"]


def test_a_rerun_after_a_crash_mid_swap_leaves_only_the_new_target(out):
    target = out / "result"
    # A crash after the old target moved aside, before staging moved in.
    write_parts({"old.csv": b"old\n"})(str(out / ".result.previous-r1-1"))

    commit(target, write_parts({"new.csv": b"new\n"}), "r1-2")

    assert tree(target) == {"new.csv": b"new\n"}
    assert sorted(p.name for p in out.iterdir()) == ["result"]


def test_write_to_is_given_a_fresh_staging_directory_beside_the_target(out):
    target = out / "result"
    seen: list[Path] = []

    def write_to(staging: str) -> None:
        seen.append(Path(staging))
        assert not Path(staging).exists()
        write_parts({"x": b"1"})(staging)

    commit(target, write_to, "r9-1")

    assert seen[0].parent == out
    assert seen[0].name.startswith(".result")


# count_rows


def test_count_rows_of_parquet_reads_the_footers_of_every_file(out):
    target = out / "result"
    (target / "day=1").mkdir(parents=True)
    pq.write_table(pa.table({"id": range(7)}), target / "part-0.parquet")
    pq.write_table(pa.table({"id": range(5)}), target / "day=1" / "part-1.parquet")
    (target / "_SUCCESS").write_bytes(b"")
    (target / ".part-0.parquet.crc").write_bytes(b"not parquet")

    assert count_rows(target, "parquet") == 12


def test_count_rows_of_csv_with_a_header_skips_one_line_per_file(out):
    target = out / "result"
    write_parts(
        {
            "part-0.csv": b"id\n1\n2\n3\n",
            "part-1.csv": b"id\n4\n",
            "part-2.csv": b"id\n",
            "part-3.csv.gz": gzip.compress(b"id\n5\n6\n"),
            "_SUCCESS": b"",
        }
    )(str(target))

    assert count_rows(target, "csv", header=True) == 6
    assert count_rows(target, "csv", header=False) == 10


def test_count_rows_of_an_empty_csv_file_with_a_header_is_zero(out):
    target = out / "result"
    write_parts({"part-0.csv": b""})(str(target))

    assert count_rows(target, "csv", header=True) == 0


def test_count_rows_of_json_lines_counts_lines(out):
    target = out / "result"
    write_parts(
        {
            "part-0.json": b'{"id":1}\n{"id":2}\n',
            "part-1.json.gz": gzip.compress(b'{"id":3}\n'),
            ".part-0.json.crc": b"x\ny\n",
        }
    )(str(target))

    assert count_rows(target, "json") == 3


# Validators


def test_validate_resolves_a_relative_path_and_fills_default_compression(tmp_path, out, env):
    assert VALIDATORS["parquet"]({"path": "out/result"}, env) == {
        "path": str(out / "result"),
        "compression": "snappy",
        "partition_by": [],
    }
    assert VALIDATORS["csv"]({"path": str(out / "r"), "header": False, "delimiter": ";"}, env) == {
        "path": str(out / "r"),
        "header": False,
        "delimiter": ";",
        "compression": "none",
        "partition_by": [],
    }
    assert VALIDATORS["json"]({"path": str(out / "r"), "compression": "gzip"}, env)["compression"] == "gzip"


def _refused(env: Environment, kind: str, **config) -> ConfigError:
    """The error of the ``kind`` sink's validation of ``config``."""
    with pytest.raises(ConfigError) as excinfo:
        VALIDATORS[kind](config, env)
    return excinfo.value


@pytest.mark.parametrize("kind", ["parquet", "csv", "json"])
@pytest.mark.parametrize("config", [{}, {"path": ""}])
def test_validate_requires_a_path(env, kind, config):
    assert _refused(env, kind, **config).field == "sink.path"


@pytest.mark.parametrize("path", ["/tmp/elsewhere", "out/../escaped", "../../out"])
def test_validate_refuses_a_path_outside_the_allowed_roots(env, path):
    refused = _refused(env, "parquet", path=path)

    assert refused.field == "sink.path"
    assert "outside the allowed roots" in refused.reason


@pytest.mark.parametrize("path", ["out", "out/", "out/sub/.."])
def test_validate_refuses_an_allowed_root_itself(env, path):
    # Committing swaps the whole directory, so writing to a root would replace the root.
    refused = _refused(env, "csv", path=path)

    assert refused.field == "sink.path"
    assert "not the root" in refused.reason


@pytest.mark.parametrize("compression", ["brotli", "GZIP", ""])
def test_validate_refuses_an_unknown_compression(out, env, compression):
    assert _refused(env, "parquet", path=str(out / "r"), compression=compression).field == "sink.compression"


def test_validate_refuses_csv_options_on_other_sinks(out, env):
    assert _refused(env, "parquet", path=str(out / "r"), header=True).field == "sink.header"


def test_validate_refuses_a_delimiter_longer_than_one_character(out, env):
    assert _refused(env, "csv", path=str(out / "r"), delimiter="::").field == "sink.delimiter"


@pytest.mark.parametrize("partition_by", [["day", 3], "day"])
def test_validate_refuses_partition_by_that_is_not_a_list_of_names(out, env, partition_by):
    assert (
        _refused(env, "parquet", path=str(out / "r"), partition_by=partition_by).field == "sink.partition_by"
    )


def test_validate_refuses_a_header_that_is_not_a_boolean(out, env):
    assert _refused(env, "csv", path=str(out / "r"), header="yes").field == "sink.header"


def test_a_stale_attempt_publishes_nothing_and_removes_only_its_own_staging(out):
    target = out / "result"
    commit(target, write_parts({"part-0.csv": b"good\n"}), "r1-1")
    # Attempt 3 of the same run is still writing its staging directory.
    write_parts({"part-0.csv": b"in progress\n"})(str(out / ".result.staging-r1-3"))

    published = commit(
        target, write_parts({"part-0.csv": b"stale\n"}), "r1-2", publish=lambda rows, swap: False
    )

    assert published is False
    assert tree(target) == {"part-0.csv": b"good\n"}
    assert sorted(p.name for p in out.iterdir()) == [".result.staging-r1-3", "result"]


def test_publish_is_told_the_rows_staged_and_a_refusal_keeps_the_target(out):
    target = out / "result"
    commit(target, write_parts({"part-0.csv": b"kept\n"}), "r1-1")
    told = []

    def refuse(rows: int, swap) -> bool:
        told.append(rows)
        raise RuntimeError("the staged sink holds 2 rows but the job wrote 3")

    with pytest.raises(RuntimeError, match="job wrote 3"):
        commit(target, write_parts({"a.csv": b"1\n", "b.csv": b"2\n"}), "r2-1", publish=refuse)

    assert told == [2]
    assert tree(target) == {"part-0.csv": b"kept\n"}
    assert sorted(p.name for p in out.iterdir()) == ["result"]


def test_a_sink_path_that_is_a_file_is_refused_and_left_alone(out):
    target = out / "afile"
    target.write_bytes(b"keep me")

    with pytest.raises(NotADirectoryError, match="is a file"):
        commit(target, write_parts({"x": b"1"}), "r1-1")

    assert target.read_bytes() == b"keep me"
    assert sorted(p.name for p in out.iterdir()) == ["afile"]


def test_a_sink_below_a_file_is_refused_at_validation(out, env):
    (out / "afile").write_text("a file where a directory should be")

    with pytest.raises(ConfigError, match="afile is a file") as refused:
        VALIDATORS["parquet"]({"path": str(out / "afile" / "deeper" / "sink")}, env)

    assert refused.value.field == "sink.path"


# append_epoch: one epoch of a stream added to a sink that is never replaced


SPARK_PART = "part-00000-0b7e5a9c-c000.snappy.parquet"  # as Spark names a written file


def append(target: Path, write_to, epoch_key: str, publish=swap_and_publish, count=count_files) -> bool:
    return append_epoch(target, write_to, count, epoch_key=epoch_key, publish=publish)


def test_an_epoch_adds_its_files_named_by_run_and_epoch_and_keeps_the_others(out):
    target = out / "result"
    target.mkdir()
    (target / "part-earlier.snappy.parquet").write_bytes(b"earlier")

    published = append(target, write_parts({SPARK_PART: b"rows", "_SUCCESS": b""}), "r1-00000007")

    assert published is True
    assert tree(target) == {
        "part-earlier.snappy.parquet": b"earlier",
        "part-r1-00000007.snappy.parquet": b"rows",
    }
    assert sorted(p.name for p in out.iterdir()) == ["result"]  # no staging left beside it


def test_an_epoch_keeps_partition_directories_and_numbers_extra_files(out):
    target = out / "result"
    parts = {
        "day=1/part-00000-aa-c000.csv.gz": b"a",
        "day=1/part-00000-aa-c001.csv.gz": b"b",
        "day=2/part-00000-aa.c000.csv.gz": b"c",
        # A uuid that ends in "c" and three digits, before the counter.
        "day=3/part-00000-0b7e5a9c-4d2f-8e1a-bc12ac123.c000.csv.gz": b"d",
    }

    append(target, write_parts(parts), "r1-00000002")

    assert tree(target) == {
        "day=1/part-r1-00000002.csv.gz": b"a",
        "day=1/part-r1-00000002-1.csv.gz": b"b",
        "day=2/part-r1-00000002.csv.gz": b"c",
        "day=3/part-r1-00000002.csv.gz": b"d",
    }


def test_an_epoch_without_rows_adds_no_file(out):
    target = out / "result"
    told = []

    def publish(rows: int, move) -> bool:
        told.append(rows)
        move()
        return True

    append(
        target,
        write_parts({SPARK_PART: b"", "_SUCCESS": b""}),
        "r1-00000001",
        publish=publish,
        count=lambda s: 0,
    )

    assert told == [0]
    assert tree(target) == {}
    assert sorted(p.name for p in out.iterdir()) == ["result"]


def test_a_refused_epoch_moves_nothing_and_removes_its_staging(out):
    target = out / "result"

    published = append(target, write_parts({SPARK_PART: b"stale"}), "r1-00000001", publish=lambda r, m: False)

    assert published is False
    assert tree(target) == {}
    assert sorted(p.name for p in out.iterdir()) == ["result"]


def test_a_retry_after_a_crash_between_move_and_commit_leaves_the_epoch_once(out):
    target = out / "result"
    first = {"day=1/part-00000-aa-c000.json": b"1", "day=2/part-00000-aa-c000.json": b"2"}

    def crash_after_move(rows: int, move) -> bool:
        move()
        raise RuntimeError("the database went away before the commit")

    with pytest.raises(RuntimeError, match="went away"):
        append(target, write_parts(first), "r1-00000003", publish=crash_after_move)
    assert set(tree(target)) == {"day=1/part-r1-00000003.json", "day=2/part-r1-00000003.json"}
    # The crashed attempt's staging stays: it tells the retry that files may be out there.
    assert len([p for p in out.iterdir() if p.name.startswith(".result.epoch-r1-00000003-")]) == 1

    append(target, write_parts({"day=1/part-00000-bb-c000.json": b"1 again"}), "r1-00000003")

    assert tree(target) == {"day=1/part-r1-00000003.json": b"1 again"}
    assert sorted(p.name for p in out.iterdir()) == ["result"]


def test_an_epoch_removes_what_a_driver_killed_after_an_earlier_commit_left(out):
    target = out / "result"
    append(target, write_parts({SPARK_PART: b"epoch 1"}), "r1-00000001")
    # Killed after epoch 1 committed, before its staging went; another run's attempt is live.
    write_parts({"x": b""})(str(out / ".result.epoch-r1-00000001-dead"))
    write_parts({"x": b""})(str(out / ".result.epoch-r2-00000001-live"))

    append(target, write_parts({SPARK_PART: b"epoch 2"}), "r1-00000002")

    assert sorted(p.name for p in out.iterdir()) == [".result.epoch-r2-00000001-live", "result"]


def test_a_retry_leaves_the_files_of_other_epochs_and_runs_alone(out):
    target = out / "result"
    append(target, write_parts({SPARK_PART: b"epoch 1"}), "r1-00000001")
    append(target, write_parts({SPARK_PART: b"run 2"}), "r2-00000002")
    write_parts({"x": b""})(str(out / ".result.epoch-r1-00000002-dead"))  # a crashed attempt

    append(target, write_parts({SPARK_PART: b"epoch 2"}), "r1-00000002")

    assert tree(target) == {
        "part-r1-00000001.snappy.parquet": b"epoch 1",
        "part-r1-00000002.snappy.parquet": b"epoch 2",
        "part-r2-00000002.snappy.parquet": b"run 2",
    }


def test_an_epoch_refuses_a_target_that_fails_the_check(out):
    target = out / "result"

    def refuse() -> None:
        raise ConfigError("sink.path", "now a symlink")

    with pytest.raises(ConfigError, match="now a symlink"):
        append_epoch(
            target, write_parts({SPARK_PART: b"x"}), count_files, epoch_key="r1-00000001",
            publish=swap_and_publish, check=refuse,
        )  # fmt: skip

    assert not target.exists()
