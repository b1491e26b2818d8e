"""The sink kit itself: each of its cases fails for a sink broken the way that case guards
against (a parquet directory sink, broken on purpose)."""

from __future__ import annotations

import shutil
import uuid
from dataclasses import replace
from pathlib import Path

import pytest

from connectors.files.sink import append_epoch, commit_directory, count_rows
from source_support.registry import SinkConnector
from source_support.testing.sink_suite import SinkConformanceSuite, local_spark
from tests.connectors.files.test_sink_conformance import SINKS, FilesSinkContext


def parquet_rows(staging: Path) -> int:
    return count_rows(staging, "parquet")


def write_in_place(df, config, *, attempt_key, publish, env):
    target = Path(config["path"])
    shutil.rmtree(target, ignore_errors=True)
    df.write.parquet(str(target))
    return publish(parquet_rows(target), lambda: None)


def publish_whatever_the_fence_says(df, config, *, attempt_key, publish, env):
    def accept(rows, swap):
        swap()
        return True

    write = lambda staging: df.write.parquet(staging)  # noqa: E731
    return commit_directory(
        Path(config["path"]), write, parquet_rows, attempt_key=attempt_key, publish=accept
    )


def epoch_files_named_anew(df, config, *, epoch_key, publish, env):
    write = lambda staging: df.write.parquet(staging)  # noqa: E731
    key = f"{epoch_key}{uuid.uuid4().hex[:6]}"
    return append_epoch(Path(config["path"]), write, parquet_rows, epoch_key=key, publish=publish)


def adds_to_the_target(df, config, *, attempt_key, publish, env):
    write = lambda staging: df.write.parquet(staging)  # noqa: E731
    return append_epoch(Path(config["path"]), write, parquet_rows, epoch_key=attempt_key, publish=publish)


def drops_a_column(df, config, *, attempt_key, publish, env):
    return SINKS["parquet"].write(
        df.drop("amount"), config, attempt_key=attempt_key, publish=publish, env=env
    )


class BrokenContext(FilesSinkContext):
    def __init__(self, root: Path, **broken) -> None:
        super().__init__(root, "parquet")
        self.broken = broken

    @property
    def connector(self) -> SinkConnector:
        return replace(SINKS["parquet"], **self.broken)


BREAKAGES = [
    ("test_a_bounded_run_replaces_the_sink_whole", {"write": adds_to_the_target}),
    ("test_a_run_that_fails_before_it_publishes_leaves_the_old_content", {"write": write_in_place}),
    ("test_an_aborted_attempt_leaves_nothing_visible", {"write": publish_whatever_the_fence_says}),
    (
        "test_a_stream_epoch_is_added_once_whatever_attempts_repeat_or_crash",
        {"append": epoch_files_named_anew},
    ),
    ("test_the_rows_read_back_have_the_declared_schema", {"write": drops_a_column}),
]


@pytest.mark.parametrize(("case", "broken"), BREAKAGES, ids=[case for case, _ in BREAKAGES])
@pytest.mark.slow
def test_each_case_fails_for_the_breakage_it_guards_against(case, broken, tmp_path):
    with pytest.raises(AssertionError):
        getattr(SinkConformanceSuite(), case)(BrokenContext(tmp_path, **broken), local_spark())
