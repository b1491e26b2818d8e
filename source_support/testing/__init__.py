"""The connector conformance kit (Flink's ``SourceTestSuiteBase`` and ``SinkTestSuiteBase``).

- ``ExternalContext``: what a connector's tests implement to write data its source reads.
- ``SourceHarness``: runs a source on the runtime's own enumerator tick and reader loop,
  over the in-memory coordinator, store and landing zone of ``memory``.
- ``SourceConformanceSuite`` (``suite``): the cases; a connector's test class inherits them.
- ``SinkConformanceSuite`` and ``SinkContext`` (``sink_suite``): the same for a sink.
- ``OptionsContract`` (``options_contract``): the cases of a connector's declared options.

Nothing here imports Django or Celery; ``suite``, ``sink_suite`` and ``options_contract``
import pytest.
"""

from source_support.testing.external import ExternalContext, NotApplicable, Record, SourceOptions
from source_support.testing.harness import LandedBatch, SourceHarness
from source_support.testing.memory import (
    ContractViolation,
    ManualClock,
    MemoryLandingZone,
    MemoryRunCoordinator,
    MemoryRunStore,
)

__all__ = [
    "ContractViolation",
    "ExternalContext",
    "LandedBatch",
    "ManualClock",
    "MemoryLandingZone",
    "MemoryRunCoordinator",
    "MemoryRunStore",
    "NotApplicable",
    "Record",
    "SourceHarness",
    "SourceOptions",
]
