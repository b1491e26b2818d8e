"""Dead letters: discarding them, and replaying them into the flow's sink.

A replay is a run of the flow (``trigger = "replay"``) that reads no source: this module
parses the dead letters' raw records with the flow's current format (the user fixed the
schema since), lands the records that parse as one batch of a single split, and hands the
run straight to the transform. The transform then goes the way of any bounded run (its
attempts, fence and retries), except that it adds its rows to the sink under a name of
the replay run (``append``, as a stream's epoch does) instead of replacing what earlier
runs wrote. In the transaction that publishes those rows, the replayed dead letters whose
record parsed are deleted and those that failed again become dead letters of the replay
run, with the new reason (``runs.replay``). A replay that fails or is
stopped changes no dead letter: nothing is lost, nothing is counted twice.

Only the lines of a file can be parsed again this way (a stream entry's dead letter is its
fields as JSON), and only a transform that maps each record on its own can append: an
aggregate over the replayed records alone is not the aggregate over all of them.
"""

from __future__ import annotations

import bisect
import gzip
import itertools
import uuid
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
from django.db import transaction
from django.db.models import QuerySet

from dataflow.models import (
    ACTIVE_RUN_STATUSES,
    DataFlow,
    DeadLetter,
    FlowRun,
    FlowStatus,
    LandedBatch,
    RunStatus,
    Split,
    SplitStatus,
)
from dataflow.services.context import landing_zone, run_key
from dataflow.services.environment import environment
from dataflow.services.errors import FlowStateError
from dataflow.services.lineage import run_lineage_emit
from dataflow.services.quotas import quota_check_run_start
from dataflow.services.runs.replay import REPLAY_SPLIT, REPLAY_TRIGGER
from dataflow.services.runs.start import run_schema_resolve
from dataflow.services.runs.tick import request_tick
from dataflow.services.specs import flow_spec_of, flow_spec_validate
from dataflow.services.streams.query import QueryKind, stream_query_classify
from dataflow.services.ticks import flow_ticks_set
from source_support.errors import ConfigError
from source_support.formats import CsvFormat, FormatSpec, MissingColumns, RecordFormat
from source_support.lines import MAX_RECORD_BYTES
from source_support.registry import SINKS, SOURCES, source_is_unbounded
from source_support.schema import parse_ddl

#: Ids named in a refusal, at most.
IDS_SHOWN = 20


def dead_letters_discard(*, flow: DataFlow, ids: list[int] | None = None, run_id: int | None = None) -> int:
    """Deletes the flow's dead letters named by ``ids``, or all those of run ``run_id``
    (both: those ids, which must be of that run); returns how many were deleted.

    Refuses with ConfigError("ids") naming ids that are not the flow's dead letters,
    ConfigError("run") for a run of another flow, and FlowStateError while a replay of
    the flow runs (it decides what becomes of the dead letters it replays).
    """
    with transaction.atomic():
        flow = DataFlow.objects.select_for_update().get(pk=flow.pk)
        letters = _chosen(flow, ids=ids, run_id=run_id)
        if flow.runs.filter(status__in=ACTIVE_RUN_STATUSES, trigger=REPLAY_TRIGGER).exists():
            raise FlowStateError(f"a replay of the dead letters of flow {flow.name!r} is running")
        deleted, _ = letters.delete()
    return deleted


def dead_letters_replay(
    *, flow: DataFlow, ids: list[int] | None = None, run_id: int | None = None
) -> FlowRun:
    """Replays the flow's dead letters named by ``ids`` or of run ``run_id`` into a new run
    (trigger "replay"): their raw records are parsed with the flow's current format, and
    those that parse go through the flow's transform and are added to its sink, beside
    what earlier runs wrote. Once that run succeeds, each replayed dead letter whose record
    reached the sink is deleted, and each that failed again is a dead letter of the new
    run with the new reason; until then (and if it fails or is stopped) they stay as they are.

    Refuses with FlowStateError while the flow has an active run, and with ConfigError
    naming the field when there is nothing to replay, when the ids are not the flow's,
    when the flow cannot add rows to its sink (its source, sink or transform), or when the
    dead letters' run is not the one whose rows the sink holds (a later run replaced them).
    """
    values = flow_spec_validate(flow_spec_of(flow), owner=flow.owner)
    _check_replayable(values)
    schema_ddl = run_schema_resolve(values, owner=flow.owner)
    if not schema_ddl:
        raise ConfigError(
            "format.schema", "is needed to parse the dead letters: the source holds no file to infer it from"
        )
    uid = uuid.uuid4()
    landing = landing_zone()
    try:
        with transaction.atomic():
            flow = DataFlow.objects.select_for_update().get(pk=flow.pk)
            if flow.runs.filter(status__in=ACTIVE_RUN_STATUSES).exists():
                raise FlowStateError(
                    f"flow {flow.name!r} is running: stop it or let its run end before a replay"
                )
            quota_check_run_start(owner=flow.owner)
            letters = list(_chosen(flow, ids=ids, run_id=run_id).order_by("split_id", "position", "id"))
            field = "ids" if ids is not None else "run"
            if not letters:
                raise ConfigError(field, "names no dead letter: there is nothing to replay")
            _check_distinct_records(letters, field)
            _check_rows_in_sink(flow, letters, values, field)
            fmt = FormatSpec(values["format_type"], values["format_options"]).build(parse_ddl(schema_ddl))
            # Lines, not entries: fields is a format of entry sources, refused by _check_replayable.
            assert isinstance(fmt, RecordFormat)
            records, failed = _parse_letters(flow, letters, fmt)
            run = FlowRun.objects.create(
                flow=flow,
                uid=uid,
                trigger=REPLAY_TRIGGER,
                status=RunStatus.TRANSFORMING,
                spec={**values, "replay": {"dead_letters": [d.pk for d in letters], "failed": failed}},
                schema_ddl=schema_ddl,
                enumeration_done=True,
                message=f"replaying {len(letters)} dead letter(s): {records.num_rows} parse, {len(failed)} fail again",
            )
            _land(run, records, letters=len(letters), failed=len(failed))
            flow.status = FlowStatus.RUNNING
            flow.save(update_fields=["status", "updated_at"])
            flow_ticks_set(flow=flow, enabled=True)
    except BaseException:
        landing.discard_run(uid.hex)  # what was landed for a run that was never created
        raise
    transaction.on_commit(lambda: request_tick(run_id=run.pk))
    # A run as any other: its end (COMPLETE, FAIL) is sent, so its START is too.
    transaction.on_commit(lambda: run_lineage_emit(run=run, event_type="START"), robust=True)
    return run


# Choosing and checking.


def _chosen(flow: DataFlow, *, ids: list[int] | None, run_id: int | None) -> QuerySet:
    if ids is None and run_id is None:
        raise ConfigError("ids", "name the dead letters: their ids, or the run whose dead letters they are")
    letters = DeadLetter.objects.filter(flow=flow)
    if run_id is not None:
        if isinstance(run_id, bool) or not isinstance(run_id, int):
            raise ConfigError("run", "must be the id of a run (an integer)")
        if not FlowRun.objects.filter(pk=run_id, flow=flow).exists():
            raise ConfigError("run", f"{run_id} is not a run of flow {flow.name!r}")
        letters = letters.filter(run_id=run_id)
    if ids is not None:
        if not isinstance(ids, list | tuple) or any(
            isinstance(i, bool) or not isinstance(i, int) for i in ids
        ):
            raise ConfigError("ids", "must be a list of dead-letter ids (integers)")
        found = set(letters.filter(pk__in=ids).values_list("pk", flat=True))
        foreign = sorted(set(ids) - found)
        if foreign:
            of = f"flow {flow.name!r}" + (f" run {run_id}" if run_id is not None else "")
            raise ConfigError("ids", f"{_listed(foreign)} are not dead letters of {of}")
        letters = letters.filter(pk__in=ids)
        dropped = sorted(letters.exclude(expectation="").values_list("pk", flat=True))
        if dropped:
            raise ConfigError(
                "ids",
                f"{_listed(dropped)} are output rows an expectation dropped, not records: "
                "they cannot be replayed (discard them, or change the expectation and run again)",
            )
    # Rows an expectation dropped are the transform's output, not records to parse again.
    return letters.filter(expectation="")


def _check_replayable(values: dict[str, Any]) -> None:
    """Refuses a flow whose dead letters cannot be parsed again, or whose rows cannot be
    added to its sink without changing what it holds."""
    source_type, sink_type = values["source_type"], values["sink_type"]
    if SOURCES[source_type].reads_entries:
        raise ConfigError(
            "source.type",
            f"the dead letters of a {source_type} source are entries kept as JSON; a replay parses "
            "lines of a file again (a files source)",
        )
    if SINKS[sink_type].append is None:
        raise ConfigError(
            "sink.type",
            f"a {sink_type} sink is replaced whole by each run; a replay adds rows to the sink "
            "and needs one that appends (parquet, csv, json)",
        )
    query = stream_query_classify(values["transform_sql"])
    if query.kind != QueryKind.STATELESS:
        why = query.reason or f"it aggregates over event-time windows of {query.time_column!r}"
        raise ConfigError(
            "transform.sql",
            f"{why}: over the replayed records alone it would not give what it gives over all "
            "the records; start the flow again to read them with the others",
        )


def _check_distinct_records(letters: Sequence[DeadLetter], field: str) -> None:
    """Refuses two dead letters of the same record (two runs read the same file): replaying
    both would write it twice."""
    for (split_id, position), group in itertools.groupby(letters, key=lambda d: (d.split_id, d.position)):
        pks = [d.pk for d in group]
        if len(pks) > 1:
            raise ConfigError(
                field,
                f"dead letters {_listed(pks)} are the same record ({split_id} at {position}) read by "
                "different runs: replay one of them",
            )


def _check_rows_in_sink(
    flow: DataFlow, letters: Sequence[DeadLetter], values: dict[str, Any], field: str
) -> None:
    """A bounded flow's sink holds the rows of its latest successful run (each run replaces
    it): only that run's dead letters, and those of replays since, belong with them. A
    stream's sink keeps the rows of every run."""
    if source_is_unbounded(values["source_type"], values["source_config"]):
        return
    latest = (
        flow.runs.filter(status=RunStatus.SUCCEEDED).exclude(trigger=REPLAY_TRIGGER).order_by("-id").first()
    )
    current = {latest.pk} if latest else set()
    if latest is not None:
        current |= set(
            flow.runs.filter(pk__gt=latest.pk, trigger=REPLAY_TRIGGER).values_list("pk", flat=True)
        )
    stale = sorted({d.run_id for d in letters} - current)
    if stale:
        holder = f"run {latest.pk} wrote it" if latest else "no run has written it"
        raise ConfigError(
            field,
            f"the dead letters of run {_listed(stale)} do not belong with the rows the sink holds "
            f"({holder}); start the flow again to read their records with the others",
        )


# Parsing and landing.


def _parse_letters(
    flow: DataFlow, letters: Sequence[DeadLetter], fmt: RecordFormat
) -> tuple[pa.Table, dict[str, str]]:
    """The records of ``letters`` that parse with ``fmt``, and why each other one fails
    (dead-letter id as text -> reason). Letters come sorted by split: a CSV file's header
    says in which order its columns are."""
    tables: list[pa.Table] = []
    failed: dict[str, str] = {}
    for split_id, group in itertools.groupby(letters, key=lambda d: d.split_id):
        group = list(group)
        split_fmt, problem = _format_of_split(flow, split_id, fmt)
        if problem:
            failed.update({str(d.pk): problem for d in group})
            continue
        table, reasons = _parse_records(split_fmt, group)
        tables.append(table)
        failed.update({str(pk): reason for pk, reason in reasons.items()})
    return (pa.concat_tables(tables) if tables else fmt.empty()), failed


def _format_of_split(flow: DataFlow, split_id: str, fmt: RecordFormat) -> tuple[RecordFormat, str]:
    """``fmt`` bound to the header of the split's file for a CSV with a header (the reader
    maps columns by name); a reason instead when that header cannot be read."""
    if not (isinstance(fmt, CsvFormat) and fmt.has_header and fmt.schema is not None):
        return fmt, ""
    payload = (
        Split.objects.filter(run__flow=flow, split_id=split_id)
        .order_by("-id")
        .values_list("payload", flat=True)
        .first()
    )
    if not isinstance(payload, dict):
        payload = {}  # no split of that name, or a payload that names no file
    path = payload.get("path")
    if not isinstance(path, str):
        return fmt, f"the file of {split_id} is not known: its CSV header names the columns"
    if not environment().is_allowed(Path(path)):
        return fmt, f"{path} is outside the allowed roots: its CSV header names the columns"
    try:
        opener = gzip.open if payload.get("compressed") else open
        with opener(path, "rb") as f:
            header = f.readline(MAX_RECORD_BYTES)
    except OSError as exc:
        return fmt, f"the header of {path} cannot be read ({exc.strerror or exc}): it names the CSV columns"
    try:
        return fmt.bind_header(header), ""
    except MissingColumns as exc:
        return fmt, f"{path}: {exc}"


def _parse_records(fmt: RecordFormat, letters: Sequence[DeadLetter]) -> tuple[pa.Table, dict[int, str]]:
    """Parses the raw records of ``letters`` as one block; each bad record's offset in the
    block says which letter it was. Should the block not split into one record per letter
    (a raw record that the format reads as two, or as none), each is parsed on its own."""
    failed = {d.pk: f"holds no record to replay ({d.error})" for d in letters if not d.raw.strip()}
    usable = [d for d in letters if d.pk not in failed]
    if not usable:
        return fmt.empty(), failed
    raws = [d.raw.encode() + b"\n" for d in usable]
    starts = list(itertools.accumulate((len(r) for r in raws[:-1]), initial=0))
    table, bad = fmt.parse(b"".join(raws), 0)
    if table.num_rows + len(bad) != len(usable):
        return _parse_each(fmt, usable, failed)
    for record in bad:
        failed[usable[bisect.bisect_right(starts, record.position) - 1].pk] = record.reason
    return table, failed


def _parse_each(
    fmt: RecordFormat, letters: Iterable[DeadLetter], failed: dict[int, str]
) -> tuple[pa.Table, dict[int, str]]:
    tables = []
    for letter in letters:
        table, bad = fmt.parse(letter.raw.encode() + b"\n", 0)
        if bad:
            failed[letter.pk] = bad[0].reason
        elif table.num_rows != 1:
            failed[letter.pk] = f"the format reads it as {table.num_rows} records, not one"
        else:
            tables.append(table)
    return (pa.concat_tables(tables) if tables else fmt.empty()), failed


def _land(run: FlowRun, records: pa.Table, *, letters: int, failed: int) -> None:
    """The run's single split, finished, and its landed batch (if any record parsed)."""
    split = Split.objects.create(
        run=run,
        split_id=REPLAY_SPLIT,
        payload={"dead_letters": letters},
        position=letters,
        status=SplitStatus.FINISHED,
        records_read=records.num_rows,
        errors_count=failed,
    )
    if not records.num_rows:
        return
    landing = landing_zone()
    path = landing.batch_path(run_key(run), REPLAY_SPLIT, 0, letters)
    landing.land(path, records)
    LandedBatch.objects.create(
        split=split, start_position=0, end_position=letters, path=str(path), records=records.num_rows
    )


def _listed(ids: Sequence[int]) -> str:
    shown = ", ".join(str(i) for i in ids[:IDS_SHOWN])
    return shown + (f" and {len(ids) - IDS_SHOWN} more" if len(ids) > IDS_SHOWN else "")
