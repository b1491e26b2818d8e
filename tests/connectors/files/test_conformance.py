"""The conformance kit over the files source: bounded, and watched (``watch = true``)."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import pytest

from connectors.files.config import FilesSourceConfig
from connectors.files.source import FileSource
from source_support.formats import FormatSpec
from source_support.registry import BuildContext, Environment
from source_support.testing import ExternalContext, NotApplicable, Record, SourceOptions
from source_support.testing.suite import SourceConformanceSuite

COLUMNS = ("id", "split", "text")
FORMAT = FormatSpec("csv", {"schema": "id BIGINT, split BIGINT, text STRING", "header": True})


class FilesContext(ExternalContext):
    """Split i is a CSV file (each further write to it, another file), written as a
    careful writer does: a hidden temporary file, renamed into place."""

    def __init__(self, root: Path, *, watch: bool = False) -> None:
        self.root = (root / "data").resolve()
        self.root.mkdir()
        self.env = Environment(allowed_roots=(self.root,), base_dir=root)
        self.watch = watch
        self.writes_while_running = watch
        self.written: list[Record] = []
        self.files = Counter()
        self.clock = None

    def splits_wanted(self, count: int) -> None:
        """Files are made as they are written."""

    def write(self, split_index: int, records: list[Record]) -> list[Record]:
        self._write_file(split_index, [",".join(str(r[c]) for c in COLUMNS) for r in records])
        self.written += records
        return records

    def write_bad_record(self, split_index: int) -> None:
        """A file of its own whose one row has a word where the id is a number."""
        self._write_file(split_index, [f"not-a-number,{split_index},bad"])

    def append(self, split_index: int, records: list[Record]) -> list[Record]:
        raise NotApplicable(
            "a file is read as it was discovered, and one that changes while read fails its split: "
            "writers add new files (see test_changing_files.py)"
        )

    def stop_system(self) -> None:
        raise NotApplicable("files on a local disk do not go away")

    def _write_file(self, split_index: int, rows: list[str]) -> None:
        name = f"part-{split_index:04d}-{self.files[split_index]:04d}.csv"
        self.files[split_index] += 1
        temporary = self.root / f".{name}.tmp"
        lines = [",".join(COLUMNS), *rows]
        temporary.write_text("\n".join(lines) + "\n")
        if self.clock is not None:  # written now, by the run's clock
            os.utime(temporary, (self.clock(), self.clock()))
        temporary.rename(self.root / name)

    def source(self, options: SourceOptions) -> FileSource:
        self.clock = options.clock
        table = {"path": str(self.root)}
        if self.watch:
            table |= {"watch": True, "discovery_interval_ms": 1000}
        context = BuildContext(env=self.env, batch_size=options.batch_size, stop=options.stop)
        config = FilesSourceConfig.parse(table, self.env)
        return FileSource.from_config(config, FORMAT, context, clock=options.clock)

    def expected(self) -> list[Record]:
        return list(self.written)


class TestFilesConformance(SourceConformanceSuite):
    @pytest.fixture()
    def external_context(self, tmp_path):
        return FilesContext(tmp_path)


class TestWatchedFilesConformance(SourceConformanceSuite):
    """``watch = true``: an unbounded source, which also reads files written while it runs."""

    @pytest.fixture()
    def external_context(self, tmp_path):
        return FilesContext(tmp_path, watch=True)
