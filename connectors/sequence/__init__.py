"""Numbers from 0 to count-1 in range splits: Flink's ``NumberSequenceSource``.

A source that needs no external system: for tests, benchmarks, and flows that generate
data. Its enumerator state is O(1) whatever the number of splits.
"""

from connectors.sequence.config import SequenceSourceConfig
from connectors.sequence.source import NumberSequenceSource
from source_support.registry import SourceConnector, register_source


def register() -> None:
    """The entry point of the ``activedataflow.connectors`` group (``pyproject.toml``)."""
    register_source(
        SourceConnector(
            type="sequence",
            config=SequenceSourceConfig,
            build=NumberSequenceSource.from_config,
            description="The numbers 0 to count-1 in a column 'value', cut into range splits.",
        )
    )
