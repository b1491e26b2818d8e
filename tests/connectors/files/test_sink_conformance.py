"""The sink kit over the parquet, csv and json directory sinks, on a local Spark session."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from connectors.files.sink import FILE_SINKS
from source_support.registry import Environment, SinkConnector
from source_support.testing.sink_suite import SinkConformanceSuite, SinkContext

SINKS = {sink.type: sink for sink in FILE_SINKS}


class FilesSinkContext(SinkContext):
    """A directory under an allowed root; a plain reader reads its data files (not the
    hidden or ``_`` ones Spark and the sink keep beside them)."""

    def __init__(self, root: Path, kind: str) -> None:
        self.root = (root / "out").resolve()
        self.root.mkdir()
        self.kind = kind
        self.keeps_types = kind == "parquet"
        self._env = Environment(allowed_roots=(self.root,), base_dir=root)
        self.target = self.root / "result"

    @property
    def connector(self) -> SinkConnector:
        return SINKS[self.kind]

    @property
    def env(self) -> Environment:
        return self._env

    def config(self) -> dict[str, Any]:
        return self.connector.validate({"path": str(self.target)}, self._env)

    def files(self) -> list[Path]:
        if not self.target.is_dir():
            return []
        return [
            p for p in sorted(self.target.rglob("*")) if p.is_file() and not p.name.startswith((".", "_"))
        ]

    def read(self) -> pa.Table:
        files = self.files()
        if self.kind == "parquet":
            return pa.concat_tables([pq.read_table(p) for p in files]) if files else pa.table({})
        records: list[dict[str, Any]] = []
        for path in files:
            with path.open(newline="") as f:
                if self.kind == "csv":  # Spark writes a null as nothing
                    records += [{k: v or None for k, v in row.items()} for row in csv.DictReader(f)]
                else:
                    records += [json.loads(line) for line in f if line.strip()]
        return pa.Table.from_pylist(records) if records else pa.table({})


class TestParquetSinkConformance(SinkConformanceSuite):
    # Each case runs Spark jobs (up to a minute each on 3 busy workers): the whole suite runs
    # the kit; the fast lane has the files sink's own tests (test_sink.py).
    pytestmark = pytest.mark.slow

    @pytest.fixture()
    def sink_context(self, tmp_path):
        return FilesSinkContext(tmp_path, "parquet")


class TestCsvSinkConformance(SinkConformanceSuite):
    # The kit repeats the Parquet case's staging, publish and epoch path with another writer.
    pytestmark = pytest.mark.slow

    @pytest.fixture()
    def sink_context(self, tmp_path):
        return FilesSinkContext(tmp_path, "csv")


class TestJsonSinkConformance(SinkConformanceSuite):
    pytestmark = pytest.mark.slow  # as the CSV case: the Parquet path with another writer

    @pytest.fixture()
    def sink_context(self, tmp_path):
        return FilesSinkContext(tmp_path, "json")
