"""Parquet, CSV and JSON-lines directory sinks, each committed by an atomic rename; at an
``s3://bucket/prefix`` path, objects committed as ``connectors.files.object_sink`` says.

Spark writes the whole result to a staging directory beside the target; only a complete
write is renamed into place. A re-run after a crash writes the staging directory again
from the same landed data, so the target never holds a partial or doubled result.

A stream's sink (``append``) is never replaced: each epoch adds its files under names fixed
by the run and the epoch (``append_epoch``).
"""

from __future__ import annotations

import glob
import gzip
import os
import re
import shutil
import uuid
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

import pyarrow.parquet as pq

from connectors.aws.config import AwsAddress, aws_target
from connectors.files.object_sink import (
    S3Place,
    allowed_keys,
    append_objects,
    commit_objects,
    is_s3_path,
    local_staging,
    open_place,
    parse_s3_path,
)
from connectors.files.staged import named_files
from source_support.config import option
from source_support.errors import ConfigError
from source_support.registry import Environment, Publish, SinkAppend, SinkConnector, SinkWrite

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client
    from pyspark.sql import DataFrame

COMPRESSIONS = ("none", "snappy", "gzip", "zstd", "lz4")


class DirectorySinkConfig(AwsAddress, section="sink"):
    """A validated ``[sink]`` table of a ``json`` sink, and what the other file sinks share;
    ``path`` is the real path of the directory, or an ``s3://bucket/prefix`` URL (then the
    AWS fields say where and how to reach it)."""

    path: str = option(
        "The directory to write, relative to DATAFLOW_BASE_DIR and below an allowed root, or "
        "s3://bucket/prefix in an S3-compatible store: a bounded run replaces it whole, a stream "
        "adds files to it.",
        example="out/sensor-averages",
        filesystem_path=True,
    )
    compression: str = option("The codec of the files written.", default="none", choices=COMPRESSIONS)
    partition_by: list[str] = option(
        "Columns whose values name subdirectories (column=value) the rows are written into.",
        default=[],
        example=["country"],
    )

    @classmethod
    def address_keys(cls, table: Mapping[str, Any]) -> list[tuple[str, str]] | None:
        """An ``s3://`` path reaches a store (its keys must lie in the connection's key
        patterns); a local path reaches none, so it needs no connection."""
        path = table.get("path")
        if not is_s3_path(path):
            return None
        try:
            return [("path", allowed_keys(parse_s3_path(str(path), "sink.path")))]
        except ConfigError:
            return []  # the spec's own validation names what is wrong

    def to_dict(self) -> dict[str, Any]:
        """What is stored; a directory's has none of the AWS fields (not even the region)."""
        stored = super().to_dict()
        if not is_s3_path(self.path):
            stored.pop("region", None)
        return stored

    def validate(self, env: Environment) -> Self:
        if is_s3_path(self.path):
            parse_s3_path(self.path, "sink.path")
            return super().validate(env)
        for name in ("connection", "endpoint_url", "access_key_id", "secret_access_key"):
            if getattr(self, name) is not None:
                raise ConfigError(f"sink.{name}", "is for an s3:// path only; this sink writes a directory")
        target = env.resolve_path(self.path, "sink.path")  # symlinks resolved
        if target in env.real_roots():
            raise ConfigError("sink.path", "must be a directory below an allowed root, not the root")
        if os.path.lexists(target) and not os.path.isdir(target):
            raise ConfigError(
                "sink.path",
                f"{target} is an existing file; a sink is a directory that each run replaces whole",
            )
        blocker = _file_among_parents(target)
        if blocker is not None:
            raise ConfigError("sink.path", f"{blocker} is a file, so {target} cannot be created below it")
        return replace(self, path=str(target))


class ParquetSinkConfig(DirectorySinkConfig):
    """A validated ``[sink]`` table of a ``parquet`` sink."""

    compression: str = option("The codec of the files written.", default="snappy", choices=COMPRESSIONS)


class CsvSinkConfig(DirectorySinkConfig):
    """A validated ``[sink]`` table of a ``csv`` sink."""

    header: bool = option("Whether each file starts with a line naming the columns.", default=True)
    delimiter: str = option("The single character written between values.", default=",")

    def validate(self, env: Environment) -> Self:
        if len(self.delimiter) != 1:
            raise ConfigError("sink.delimiter", "must be a single character")
        return super().validate(env)


def _file_among_parents(target: Path) -> Path | None:
    """The first existing ancestor of ``target``, if it is not a directory."""
    for parent in target.parents:
        if os.path.lexists(parent):
            return None if os.path.isdir(parent) else parent
    return None


def _write_files(df: DataFrame, kind: str, config: dict[str, Any], staging: str) -> None:
    """Spark writes ``df`` into the new directory ``staging`` as the sink's files."""
    writer = df.write.mode("overwrite").option("compression", config["compression"])
    if config.get("partition_by"):
        writer = writer.partitionBy(*config["partition_by"])
    if kind == "parquet":
        writer.parquet(staging)
    elif kind == "csv":
        writer.option("header", config.get("header", True)).option("sep", config.get("delimiter", ",")).csv(
            staging
        )
    else:
        writer.json(staging)


def _row_counter(kind: str, config: dict[str, Any]) -> Callable[[Path], int]:
    return lambda staging: count_rows(staging, kind, header=kind == "csv" and config.get("header", True))


class _SinkAddress(AwsAddress, section="sink"):
    """The AWS fields of a sink's config, alone."""


#: The fields of a stored sink config that say where an ``s3://`` path is.
_AWS_FIELDS = tuple(declared.name for declared in AwsAddress.OPTIONS)


def _store(config: dict[str, Any], env: Environment) -> tuple[S3Client, S3Place]:
    """The client and the place of an ``s3://`` sink, checked before Spark computes anything."""
    typed = _SinkAddress.from_dict({k: config[k] for k in _AWS_FIELDS if k in config})
    place = parse_s3_path(config["path"], "sink.path")
    return open_place(place, aws_target(typed, env)), place


def staging_directory(target: Path, attempt_key: str) -> Path:
    """Where the bounded write ``attempt_key`` stages the sink ``target`` (``commit_directory``)."""
    return target.with_name(f".{target.name}.staging-{attempt_key}")


def _staging_bytes(config: dict[str, Any], attempt_key: str) -> int | None:
    """The bytes of the files the write ``attempt_key`` has staged so far (Spark's task
    files included, as they grow): in its staging directory beside the sink, or, for an
    ``s3://`` sink, in the local directory its files wait in before they are uploaded."""
    if is_s3_path(config["path"]):
        staging = local_staging(attempt_key)
    else:
        staging = staging_directory(Path(config["path"]), attempt_key)
    total = 0
    for folder, _, names in os.walk(staging):
        for name in names:
            try:
                total += os.stat(os.path.join(folder, name), follow_symlinks=False).st_size
            except FileNotFoundError:
                continue  # a task file renamed as it committed: counted under its new name
    return total


def _writer(kind: str) -> SinkWrite:
    def write(
        df: DataFrame, config: dict[str, Any], *, attempt_key: str, publish: Publish, env: Environment
    ) -> bool:
        if is_s3_path(config["path"]):
            client, place = _store(config, env)
            return commit_objects(
                client,
                place,
                lambda staging: _write_files(df, kind, config, staging),
                _row_counter(kind, config),
                attempt_key=attempt_key,
                publish=publish,
            )
        target = Path(config["path"])
        return commit_directory(
            target,
            lambda staging: _write_files(df, kind, config, staging),
            _row_counter(kind, config),
            attempt_key=attempt_key,
            publish=publish,
            check=lambda: env.check_destructive_target(target),
        )

    return write


def _appender(kind: str) -> SinkAppend:
    def append(
        df: DataFrame, config: dict[str, Any], *, epoch_key: str, publish: Publish, env: Environment
    ) -> bool:
        """Adds the rows of one streaming epoch to the sink (see ``append_epoch``)."""
        if is_s3_path(config["path"]):
            client, place = _store(config, env)
            return append_objects(
                client,
                place,
                lambda staging: _write_files(df.coalesce(1), kind, config, staging),
                _row_counter(kind, config),
                epoch_key=epoch_key,
                publish=publish,
            )
        target = Path(config["path"])
        return append_epoch(
            target,
            lambda staging: _write_files(df.coalesce(1), kind, config, staging),
            _row_counter(kind, config),
            epoch_key=epoch_key,
            publish=publish,
            check=lambda: env.check_destructive_target(target),
        )

    return append


def commit_directory(
    target: Path,
    write_to: Callable[[str], None],
    count: Callable[[Path], int],
    *,
    attempt_key: str,
    publish: Publish,
    check: Callable[[], None] = lambda: None,
) -> bool:
    """Writes through ``write_to(staging)`` into a staging directory of this attempt alone,
    then lets ``publish`` swap it into ``target``; returns whether it was published.

    ``attempt_key`` is ``<run>-<attempt>``: another attempt of the same run never writes
    or removes this attempt's directories. After a publish, what attempts of the same run
    left behind (a crashed attempt's staging or previous directory) is removed.
    ``check()`` runs before each step that replaces or deletes something, and refuses it
    (raises) if the target now leads out of the allowed roots (a symlink made since).
    """
    if target.exists() and not target.is_dir():
        raise NotADirectoryError(f"the sink path {target} is a file, not a directory")
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = staging_directory(target, attempt_key)
    previous = target.with_name(f".{target.name}.previous-{attempt_key}")
    check()
    shutil.rmtree(staging, ignore_errors=True)
    published = False
    try:
        write_to(str(staging))
        rows = count(staging)

        def swap() -> None:
            check()
            if target.exists():
                os.rename(target, previous)
            os.rename(staging, target)

        published = publish(rows, swap)
    finally:
        if not published:
            shutil.rmtree(staging, ignore_errors=True)
    if not published:
        return False
    check()
    run_prefix = attempt_key.rsplit("-", 1)[0]
    for debris in target.parent.glob(f".{glob.escape(target.name)}.*-{glob.escape(run_prefix)}-*"):
        shutil.rmtree(debris, ignore_errors=True)
    return True


def append_epoch(
    target: Path,
    write_to: Callable[[str], None],
    count: Callable[[Path], int],
    *,
    epoch_key: str,
    publish: Publish,
    check: Callable[[], None] = lambda: None,
) -> bool:
    """Writes one epoch of a stream through ``write_to(staging)`` beside ``target``, then lets
    ``publish(rows, move)`` move its files into ``target``; returns whether it was published.

    The files are named by ``epoch_key`` (``<run>-<epoch>``): ``part-<epoch_key>.<ext>`` in
    each directory written (``-1``, ``-2``... after the first), each moved by an atomic
    rename, so a plain reader of ``target`` sees a file whole or not at all, and a retry of
    the epoch replaces the same names instead of adding copies. An epoch without rows adds
    no file. The directory is never replaced: a stream's sink grows.

    A staging directory is removed once its epoch is published, or at once if nothing of it
    was moved; one left beside ``target`` marks an attempt that may have moved files and
    then died, and the next attempt of that epoch then removes the files of the epoch it
    does not write again (from the earlier attempt of a query whose output changed).
    ``check()`` runs before each step that changes ``target``.
    """
    if target.exists() and not target.is_dir():
        raise NotADirectoryError(f"the sink path {target} is a file, not a directory")
    check()
    target.mkdir(parents=True, exist_ok=True)
    _remove_earlier_staging(target, epoch_key)
    prefix = f".{target.name}.epoch-{epoch_key}-"
    staging = target.with_name(f"{prefix}{uuid.uuid4().hex[:12]}")
    moved: list[Path] = []
    published = False
    try:
        write_to(str(staging))
        rows = count(staging)
        files = named_files(staging, epoch_key) if rows else []
        retried = any(p != staging for p in target.parent.glob(f"{glob.escape(prefix)}*"))

        def move() -> None:
            check()
            for source, relative in files:
                destination = target / relative
                destination.parent.mkdir(parents=True, exist_ok=True)
                os.replace(source, destination)
                moved.append(destination)
            if retried:
                _remove_epoch_files(target, epoch_key, keep=set(moved))

        published = publish(rows, move)
    finally:
        if published or not moved:
            shutil.rmtree(staging, ignore_errors=True)
    if published:
        check()
        for debris in target.parent.glob(f"{glob.escape(prefix)}*"):
            shutil.rmtree(debris, ignore_errors=True)
    return published


def _remove_earlier_staging(target: Path, epoch_key: str) -> None:
    """Removes the staging directories of the run's earlier epochs: a driver killed after its
    epoch committed, before it removed its staging, leaves one that no retry will sweep.
    An epoch is only planned once the one before it committed, so those are all debris."""
    run_key, number = epoch_key.rsplit("-", 1)
    prefix = f".{target.name}.epoch-{run_key}-"
    for debris in target.parent.glob(f"{glob.escape(prefix)}*"):
        earlier = debris.name[len(prefix) :].split("-", 1)[0]
        if earlier.isdigit() and len(earlier) == len(number) and earlier < number:
            shutil.rmtree(debris, ignore_errors=True)


def _remove_epoch_files(target: Path, epoch_key: str, *, keep: set[Path]) -> None:
    named = re.compile(rf"part-{re.escape(epoch_key)}(-\d+)?\.")
    for path in target.rglob(f"part-{glob.escape(epoch_key)}*"):
        if path not in keep and named.match(path.name) and path.is_file():
            path.unlink()


def count_rows(target: Path, kind: str, *, header: bool = False) -> int:
    """Rows in a written directory, from Parquet footers or by counting lines."""
    total = 0
    for path in sorted(target.rglob("*")):
        if path.name.startswith((".", "_")) or not path.is_file():
            continue
        if kind == "parquet":
            total += pq.ParquetFile(path).metadata.num_rows
        else:
            opener = gzip.open if path.suffix == ".gz" else open
            with opener(path, "rb") as f:
                lines = sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))
            total += max(0, lines - 1) if header else lines
    return total


#: The most entries a test of a sink's directory looks at.
MAX_CHECKED_ENTRIES = 10_000


def check(config: dict[str, Any], env: Environment) -> list[str]:
    """The sink's directory: its files and their total size, or that the first run makes
    it (an ``s3://`` directory is looked at by its run only)."""
    path = config["path"]
    if is_s3_path(path):
        return [f"{path}: an object store directory, written by the run"]
    if not os.path.exists(path):
        return [f"{path}: does not exist yet (the first run makes it)"]
    if not os.path.isdir(path):
        raise ConfigError("sink.path", f"{path} is not a directory")
    files = size = 0
    for seen, entry in enumerate(Path(path).rglob("*")):
        if seen >= MAX_CHECKED_ENTRIES:
            return [
                f"{path}: more than {MAX_CHECKED_ENTRIES} entries; {files} files, {size} bytes among the first"
            ]
        if entry.is_file() and not entry.is_symlink():
            files, size = files + 1, size + entry.stat().st_size
    return [f"{path}: {files} files, {size} bytes (a bounded run replaces them)"]


def _file_sink(kind: str, config: type[DirectorySinkConfig], description: str) -> SinkConnector:
    return SinkConnector(
        type=kind,
        config=config,
        write=_writer(kind),
        append=_appender(kind),
        description=description,
        staging_bytes=_staging_bytes,
        check=check,
    )


FILE_SINKS = [
    _file_sink(
        "parquet", ParquetSinkConfig, "A directory of Parquet files, replaced whole by each bounded run."
    ),
    _file_sink("csv", CsvSinkConfig, "A directory of CSV files, replaced whole by each bounded run."),
    _file_sink(
        "json", DirectorySinkConfig, "A directory of JSON-lines files, replaced whole by each bounded run."
    ),
]
