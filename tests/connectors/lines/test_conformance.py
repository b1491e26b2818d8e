"""The conformance kit over the lines source."""

from __future__ import annotations

import pytest

from tests.connectors.lines.connector.source import LinesSource
from source_support.testing import ExternalContext, Record, SourceOptions
from source_support.testing.suite import SourceConformanceSuite


class LinesContext(ExternalContext):
    """Split i is the file ``part-i.txt``; a record is written as one line of text."""

    def __init__(self, directory) -> None:
        self.directory = directory
        self.written: list[Record] = []

    def splits_wanted(self, count: int) -> None:
        for index in range(count):
            (self.directory / f"part-{index}.txt").touch()

    def write(self, split_index: int, records: list[Record]) -> list[Record]:
        lines = [f"{r['id']},{r['split']},{r['text']}" for r in records]
        with open(self.directory / f"part-{split_index}.txt", "a") as f:
            f.writelines(line + "\n" for line in lines)
        as_read = [{"line": line} for line in lines]
        self.written += as_read
        return as_read

    def source(self, options: SourceOptions) -> LinesSource:
        return LinesSource(directory=self.directory, batch_size=options.batch_size)

    def expected(self) -> list[Record]:
        return list(self.written)


class TestLinesConformance(SourceConformanceSuite):
    @pytest.fixture()
    def external_context(self, tmp_path):
        return LinesContext(tmp_path)
