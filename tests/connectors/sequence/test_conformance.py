"""The conformance kit over the sequence source."""

from __future__ import annotations

import pytest

from connectors.sequence.source import NumberSequenceSource
from source_support.testing import ExternalContext, Record, SourceOptions
from source_support.testing.suite import SourceConformanceSuite


class SequenceContext(ExternalContext):
    """The sequence source decides its values: split i of n splits of k numbers holds
    ``i*k .. (i+1)*k - 1``, so a write keeps only how many records it was given, and
    every split must get as many."""

    def __init__(self) -> None:
        self.splits = 0
        self.sizes: dict[int, int] = {}

    def splits_wanted(self, count: int) -> None:
        self.splits, self.sizes = count, {}

    def write(self, split_index: int, records: list[Record]) -> list[Record]:
        if split_index in self.sizes:
            raise NotImplementedError("a sequence split holds one range, written once")
        size = self.sizes[split_index] = len(records)
        return [{"value": v} for v in range(split_index * size, (split_index + 1) * size)]

    def source(self, options: SourceOptions) -> NumberSequenceSource:
        sizes = set(self.sizes.values())
        assert len(self.sizes) == self.splits and len(sizes) == 1, "every range holds as many numbers"
        count = self.splits * sizes.pop()
        return NumberSequenceSource(count=count, splits=self.splits, batch_size=options.batch_size)

    def expected(self) -> list[Record]:
        size = next(iter(self.sizes.values()), 0)
        return [{"value": v} for v in range(self.splits * size)]


class TestSequenceConformance(SourceConformanceSuite):
    @pytest.fixture()
    def external_context(self):
        return SequenceContext()
