"""What an OpenLineage event of a run says (``run_lineage_event``), the datasets its source
and sink are named as, and the ``openlineage-python`` client that sends it
(``lineage_client``). ``services.lineage`` says when events are sent and sends them; it
loads this module only where lineage is on (``openlineage`` and ``pyarrow.dataset`` cost
about a second of a process's start).

An event says:
- the job: namespace ``activedataflow/<owner>`` (``activedataflow/_operator`` for a flow
  without an owner, e.g. from a TOML file), name the flow's name; the transform's SQL as
  the ``sql`` job facet;
- the run: the run's ``uid`` (unique for all time), and on FAIL the run's message as the
  ``errorMessage`` run facet. OpenLineage's run lifecycle ends at COMPLETE, FAIL or ABORT,
  with one START per run id: a run that ended and goes on again (resumed after a stop,
  by ``runflow`` too; its failed splits restarted) is a new OpenLineage run with an id of
  its own (``lineage_uid``) and its own START; a replay of dead letters starts with START
  as a fresh run does. A run that never ended (its workers restarted, ``runflow``
  following it again) is the same OpenLineage run: no second START;
- the input (the source) and the output (the sink) as datasets named by OpenLineage's
  naming spec (``dataset_of``), so the output of one flow is the input of a flow reading
  it; the input carries the run's schema as the ``schema`` facet, a files sink's output the
  schema of what it wrote (COMPLETE).

Addresses are shown as ``scheme://host:port``: no user, password or query ever goes into an
event.
"""

from __future__ import annotations

import contextlib
import logging
import os
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pyarrow.dataset as ds
from django.conf import settings
from openlineage.client import OpenLineageClient
from openlineage.client.event_v2 import InputDataset, Job, OutputDataset, Run, RunEvent, RunState
from openlineage.client.facet_v2 import error_message_run, job_type_job, schema_dataset, sql_job
from openlineage.client.transport.file import FileConfig, FileTransport
from openlineage.client.transport.http import HttpConfig, HttpTransport

from dataflow.encryption import Sealed
from dataflow.models import Connection, FlowRun
from dataflow.services.schema_changes import run_landed_ddl
from source_support.registry import glob_static_prefix, source_is_unbounded
from source_support.schema import parse_ddl

log = logging.getLogger(__name__)

PRODUCER = "https://github.com/activedataflow/activedataflow-django"
JOB_NAMESPACE_PREFIX = "activedataflow"
#: The job namespace of a flow that has no owner (an operator's, e.g. from a TOML file).
OPERATOR = "_operator"
#: The default port of each system, when a URL gives none (the naming spec wants one).
DEFAULT_PORTS = {"redis": 6379, "rediss": 6379, "nats": 4222, "tls": 4222, "kafka": 9092}


@dataclass(frozen=True)
class DatasetName:
    """A dataset as OpenLineage names it: where (``namespace``) and what (``name``)."""

    namespace: str
    name: str


def run_lineage_event(*, run: FlowRun, event_type: str) -> RunEvent:
    """The OpenLineage ``RunEvent`` of ``run`` (see the module's docstring)."""

    spec = run.spec or {}
    flow = run.flow
    owner = flow.owner.username if flow.owner_id and flow.owner else OPERATOR
    job_facets: dict[str, Any] = {
        "jobType": job_type_job.JobTypeJobFacet(
            processingType="STREAMING" if spec.get("unbounded") or _unbounded(spec) else "BATCH",
            integration="ACTIVEDATAFLOW",
            jobType="FLOW",
        )
    }
    if spec.get("transform_sql"):
        job_facets["sql"] = sql_job.SQLJobFacet(query=spec["transform_sql"])
    run_facets: dict[str, Any] = {}
    if event_type == "FAIL":
        run_facets["errorMessage"] = error_message_run.ErrorMessageRunFacet(
            message=run.message or "the run failed", programmingLanguage="python"
        )
    inputs = [
        InputDataset(namespace=d.namespace, name=d.name, facets=_schema_facets(_input_fields(run)))
        for d in datasets_of("source", spec.get("source_type", ""), spec.get("source_config") or {})
    ]
    written = _output_fields(spec) if event_type == "COMPLETE" else []
    outputs = [
        OutputDataset(namespace=d.namespace, name=d.name, facets=_schema_facets(written))
        for d in datasets_of("sink", spec.get("sink_type", ""), spec.get("sink_config") or {})
    ]
    return RunEvent(
        eventType=getattr(RunState, event_type),
        eventTime=datetime.now(UTC).isoformat(),
        run=Run(runId=str(_run_uuid(run)), facets=run_facets),
        job=Job(namespace=f"{JOB_NAMESPACE_PREFIX}/{owner}", name=flow.name, facets=job_facets),
        producer=PRODUCER,
        inputs=inputs,
        outputs=outputs,
    )


def _run_uuid(run: FlowRun) -> uuid.UUID:
    uid = run.lineage_uid or run.uid
    return uid if isinstance(uid, uuid.UUID) else uuid.UUID(str(uid))


def _unbounded(spec: dict[str, Any]) -> bool:
    try:
        return source_is_unbounded(spec.get("source_type", ""), spec.get("source_config") or {})
    except Exception:  # noqa: BLE001 - an unknown type is a batch job as far as lineage goes
        return False


def _schema_facets(fields: list[tuple[str, str]]) -> dict[str, Any]:
    if not fields:
        return {}
    return {
        "schema": schema_dataset.SchemaDatasetFacet(
            fields=[schema_dataset.SchemaDatasetFacetFields(name=n, type=t) for n, t in fields]
        )
    }


def _input_fields(run: FlowRun) -> list[tuple[str, str]]:
    if not run.schema_ddl:
        return []
    return [(f.name, str(f.type)) for f in parse_ddl(run_landed_ddl(run))]


def _output_fields(spec: dict[str, Any]) -> list[tuple[str, str]]:
    """The schema of what a files sink on this machine wrote (its Parquet, JSON or CSV
    files' own); none for other sinks (their schema is the receiver's to know)."""
    path = (spec.get("sink_config") or {}).get("path") or ""
    if spec.get("sink_type") not in ("parquet", "json", "csv") or "://" in path or not os.path.isdir(path):
        return []
    formats: dict[str, ds.FileFormat] = {
        "parquet": ds.ParquetFileFormat(),
        "json": ds.JsonFileFormat(),
        "csv": ds.CsvFileFormat(),
    }
    try:
        schema = ds.dataset(
            path, format=formats[spec["sink_type"]], partitioning="hive", exclude_invalid_files=True
        ).schema
    except Exception as exc:  # noqa: BLE001 - lineage without the output's schema, not none
        log.info("lineage: no schema of %s: %s", path, exc)
        return []
    return [(f.name, str(f.type)) for f in schema]


# Dataset names (https://openlineage.io/docs/spec/naming).


def datasets_of(section: str, kind: str, config: dict[str, Any]) -> list[DatasetName]:
    """The datasets a ``[source]`` or ``[sink]`` of type ``kind`` reads or writes, named as
    OpenLineage names them; addresses without credentials."""
    if kind in ("files", "parquet", "json", "csv"):
        path = str(config.get("path") or "")
        if path.startswith("s3://"):
            bucket, _, prefix = path.removeprefix("s3://").partition("/")
            return [DatasetName(f"s3://{bucket}", glob_static_prefix(prefix).rstrip("/") or "/")]
        local = os.path.realpath(glob_static_prefix(path)) if path else ""
        return [DatasetName("file", local)]
    if kind == "s3":
        prefix = glob_static_prefix(str(config.get("prefix") or "")).rstrip("/")
        return [DatasetName(f"s3://{config.get('bucket', '')}", prefix or "/")]
    if kind in ("redis_streams", "redis_stream"):
        where = _address(_url(config, "url"), "redis")
        return [DatasetName(where, str(config.get("streams") or config.get("key") or ""))]
    if kind in ("nats_jetstream", "nats"):
        servers = _url(config, "servers")
        where = _address(servers[0] if isinstance(servers, list) and servers else servers, "nats")
        if section == "sink":
            return [DatasetName(where, str(config.get("subject") or config.get("stream") or ""))]
        subjects = config.get("subjects") or [config.get("stream") or ""]
        return [DatasetName(where, str(s)) for s in subjects]
    if kind == "kafka":
        servers = _url(config, "bootstrap_servers")
        first = servers[0] if isinstance(servers, list) and servers else servers
        where = _address(first if "://" in str(first) else f"kafka://{first}", "kafka")
        topics = config.get("topics") or [config.get("topic_pattern") or ""]
        return [DatasetName(where, str(t)) for t in topics]
    if kind == "kinesis":
        return [DatasetName(f"kinesis://{config.get('region') or 'default'}", str(config.get("stream_name")))]
    return [DatasetName(JOB_NAMESPACE_PREFIX, f"{kind}")]


def _url(config: dict[str, Any], key: str) -> Any:
    """The option, or the named connection's URL when the config names one."""
    name = config.get("connection")
    if name:
        url = Connection.objects.filter(name=name).values_list("url", flat=True).first()
        if url is not None and not isinstance(url, Sealed):
            return url
        return f"connection://{name}"
    return config.get(key) or ""


def _address(url: Any, scheme: str) -> str:
    """``scheme://host:port`` of ``url``: its user, password, path and query left out."""
    text = str(url or "")
    if "," in text:
        text = text.split(",")[0]
    parts = urlsplit(text if "://" in text else f"{scheme}://{text}")
    try:
        port = parts.port
    except ValueError:
        port = None
    host = parts.hostname or "localhost"
    if ":" in host:
        host = f"[{host}]"
    return f"{parts.scheme or scheme}://{host}:{port or DEFAULT_PORTS.get(parts.scheme, 0)}"


def lineage_client() -> OpenLineageClient:
    url = settings.DATAFLOW_OPENLINEAGE_URL
    path = settings.DATAFLOW_OPENLINEAGE_FILE
    if url.startswith("file://"):
        path, url = urlsplit(url).path, ""
    if url:
        config = HttpConfig(
            url=url,
            endpoint=settings.DATAFLOW_OPENLINEAGE_ENDPOINT,
            timeout=settings.DATAFLOW_OPENLINEAGE_TIMEOUT_SECONDS,
            retry={
                "total": 1,
                "backoff_factor": 0.2,
                "status_forcelist": [500, 502, 503, 504],
                "allowed_methods": ["POST"],
            },
        )
        return OpenLineageClient(transport=HttpTransport(config))
    # The file's directory is made as a sink's is: a first run's START is not lost to a
    # directory (such as out/) that its sink creates only later. Should it fail, the
    # emitter logs each event's failure once, as for a receiver that does not answer.
    with contextlib.suppress(OSError):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    return OpenLineageClient(transport=FileTransport(FileConfig(log_file_path=path, append=True)))
