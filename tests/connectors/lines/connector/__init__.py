"""Text files in a directory, one split per file and one record per line."""

from tests.connectors.lines.connector.config import LinesSourceConfig
from tests.connectors.lines.connector.source import LinesSource
from source_support.registry import SourceConnector, register_source


def register() -> None:
    """The entry point of the ``activedataflow.connectors`` group (``pyproject.toml``)."""
    register_source(
        SourceConnector(
            type="lines",
            config=LinesSourceConfig,
            build=LinesSource.from_config,
            description="Text files in a directory: each file a split, each line a record in a column 'line'.",
        )
    )
