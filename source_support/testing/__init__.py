"""The connector conformance kit (Flink's ``SourceTestSuiteBase``): plain Python and pytest.

- ``ExternalContext``: what a connector's tests implement to write data its source reads.
- ``SourceHarness``: drives a source through the framework's contracts in memory.
- ``SourceConformanceSuite``: the cases; a connector's test class inherits them.

Nothing here imports Django, Celery or Redis; ``suite`` imports pytest.
"""

from source_support.testing.external import ExternalContext, Record, SourceOptions
from source_support.testing.harness import ContractViolation, LandedBatch, SourceHarness
from source_support.testing.memory import (
    ManualClock,
    MemoryBacklog,
    MemoryEnumeratorContext,
    MemoryReaderContext,
    MemoryRun,
    MemorySplitStore,
)

__all__ = [
    "ContractViolation",
    "ExternalContext",
    "LandedBatch",
    "ManualClock",
    "MemoryBacklog",
    "MemoryEnumeratorContext",
    "MemoryReaderContext",
    "MemoryRun",
    "MemorySplitStore",
    "Record",
    "SourceHarness",
    "SourceOptions",
]
