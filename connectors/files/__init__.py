"""Files in a directory or matching a glob: a source (bounded, or watched for new files),
and Parquet/CSV/JSON sinks."""

from dataclasses import replace

from connectors.files.config import FilesSourceConfig
from connectors.files.landed import (
    append_landed_parquet,
    append_table_parquet,
    takes_landed,
    write_landed_parquet,
)
from connectors.files.sink import FILE_SINKS
from connectors.files.source import FileSource, files_check_stop
from source_support.registry import SourceConnector, register_sink, register_source


def register() -> None:
    """The entry point of the ``activedataflow.connectors`` group (``pyproject.toml``)."""
    register_source(
        SourceConnector(
            type="files",
            config=FilesSourceConfig,
            build=FileSource.from_config,
            check_stop=files_check_stop,
            description="Files in a directory or matching a glob (CSV, JSON lines; gzip too); "
            "with watch = true, new files too, as they come.",
            boundedness="config",
            unbounded=lambda config: config.watch,
        )
    )
    for sink in FILE_SINKS:
        if sink.type == "parquet":  # a run whose transform is the identity needs no Spark
            sink = replace(
                sink,
                write_landed=write_landed_parquet,
                append_landed=append_landed_parquet,
                append_table=append_table_parquet,
                takes_landed=takes_landed,
            )
        register_sink(sink)
