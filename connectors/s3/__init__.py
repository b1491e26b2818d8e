"""S3-compatible object storage: a source that reads a bucket's objects under a prefix
(CSV, JSON lines; gzip too), each object or byte range a split keyed by bucket, key and
ETag; with watch = true, objects put later too."""

from typing import Any

from connectors.s3.config import S3SourceConfig
from connectors.s3.source import S3Source, s3_check_stop
from source_support.registry import Environment, SourceConnector, register_source


def register() -> None:
    """The entry point of the ``activedataflow.connectors`` group (``pyproject.toml``)."""
    register_source(
        SourceConnector(
            type="s3",
            config=S3SourceConfig,
            build=S3Source.from_s3_config,
            check_stop=s3_check_stop,
            description="Objects of an S3-compatible bucket under a prefix (CSV, JSON lines; gzip too); "
            "with watch = true, objects put later too, as they come.",
            boundedness="config",
            unbounded=lambda config: config.watch,
            sink_reads_back=sink_reads_back,
        )
    )


def sink_reads_back(source: dict[str, Any], sink_type: str, sink: dict[str, Any], env: Environment) -> str:
    """Why a sink writing ``s3://bucket/prefix`` would feed the flow's own source (it
    writes keys the source lists); empty when it does not."""
    path = sink.get("path")
    if not isinstance(path, str) or not path.startswith("s3://"):
        return ""
    bucket, _, written = path.removeprefix("s3://").partition("/")
    if bucket != source.get("bucket"):
        return ""
    read = source.get("prefix") or ""
    if written.startswith(read) or read.startswith(written):
        return (
            f"{path} lies where the flow's own source reads (s3://{bucket}/{read}): the flow would "
            "read its own output again; write under another prefix or bucket"
        )
    return ""
