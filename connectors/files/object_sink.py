"""The parquet, csv and json sinks at an ``s3://bucket/prefix`` path: an S3-compatible object
store, which has no rename.

Spark writes the run's files into a local staging directory (``local_staging``, named by the
attempt so that ``DATAFLOW_TRANSFORM_MAX_STAGING_BYTES`` is watched as for a directory sink); each
file is then uploaded as a multipart upload (``PART_BYTES`` at a time, so memory does not
grow with the output) that is left *uncompleted*: S3 shows no object until its upload is
completed, which is what the fence's swap does (the S3A "magic" committer's way). So an
attempt that fails or is fenced out before it publishes shows nothing, and its uploads are
aborted (or, after a crash, by the next attempt of the run).

A bounded run's swap removes ``_SUCCESS``, deletes every object under the prefix that is
not the new run's, completes the new run's uploads, then writes ``_SUCCESS`` (a manifest:
the attempt, its rows and its files). A listing during the swap sees a subset of the old
run's files, then a subset of the new run's, never both and never a partial object.

A stream's epoch completes its files under names fixed by the epoch key
(``part-<run>-<epoch>.<ext>``, as ``append_epoch``), so a repeated epoch replaces them; a
manifest ``_epoch-<key>.json`` written before they are completed lets a later attempt of
the same epoch delete the files of an earlier one it does not write again.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from connectors.aws.config import AwsTarget
from connectors.aws.session import AWS_ERRORS, aws_client, aws_error_reason, error_code, is_credential_error
from connectors.files.staged import named_files
from source_support.connections import glob_within
from source_support.errors import ConfigError
from source_support.registry import Publish

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

S3_SCHEME = "s3://"
#: The size of each uploaded part (S3 takes 5 MiB to 5 GiB; the last part may be smaller).
PART_BYTES = 16 * 1024 * 1024
#: Keys one DeleteObjects request takes.
_DELETE_BATCH = 1000
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
SUCCESS = "_SUCCESS"


class ObjectSinkError(Exception):
    """The object store refused or did not answer a step of the sink (no secret in it)."""


def is_s3_path(path: object) -> bool:
    return isinstance(path, str) and path.startswith(S3_SCHEME)


@dataclass(frozen=True)
class S3Place:
    """The bucket and the prefix (without its trailing ``/``) a sink owns."""

    bucket: str
    prefix: str

    @property
    def url(self) -> str:
        return f"{S3_SCHEME}{self.bucket}/{self.prefix}"

    @property
    def folder(self) -> str:
        """The keys the sink owns start with this."""
        return f"{self.prefix}/"

    def key(self, relative: Path | str) -> str:
        return f"{self.folder}{Path(relative).as_posix()}"


def parse_s3_path(path: str, field_name: str) -> S3Place:
    """The bucket and prefix of ``s3://bucket/prefix``, or a ConfigError naming ``field_name``.
    A sink replaces everything under its prefix, so a whole bucket is refused."""
    rest = path[len(S3_SCHEME) :]
    bucket, _, prefix = rest.partition("/")
    if not _BUCKET.fullmatch(bucket) or ".." in bucket:
        raise ConfigError(field_name, f"{bucket!r} is not a bucket name (3-63 of a-z, 0-9, '.', '-')")
    prefix = prefix.rstrip("/")
    if not prefix:
        raise ConfigError(
            field_name,
            "needs a prefix below the bucket (s3://bucket/prefix): a bounded run replaces "
            "everything under it, so a whole bucket is refused",
        )
    parts = prefix.split("/")
    if any(part in ("", ".", "..") for part in parts) or any(c in prefix for c in "*?[]\\"):
        raise ConfigError(field_name, f"{prefix!r} is not a plain prefix (no '//', '.', '..' or wildcards)")
    return S3Place(bucket, prefix)


def allowed_keys(place: S3Place) -> str:
    """The glob of every key the sink may write (``bucket/prefix/*``), as key patterns see it."""
    return f"{place.bucket}/{place.folder}*"


def open_place(place: S3Place, target: AwsTarget, section: str = "sink") -> S3Client:
    """A client of ``target`` once it reaches the bucket and the prefix lies within the
    connection's key patterns; a ConfigError naming the field otherwise (a wrong key pair,
    a bucket that does not exist), an ObjectSinkError if the endpoint does not answer."""
    if not glob_within(allowed_keys(place), target.key_patterns):
        raise ConfigError(
            f"{section}.path",
            f"{place.url} may reach keys outside what the connection allows "
            f"({', '.join(target.key_patterns)})",
        )
    client = aws_client(target, "s3")
    try:
        client.head_bucket(Bucket=place.bucket)
    except AWS_ERRORS as exc:
        if is_credential_error(exc) or error_code(exc) in ("403", "AccessDenied"):
            typed = target.field.endswith(".endpoint_url")
            raise ConfigError(
                f"{section}.access_key_id" if typed else target.field,
                f"{target.shown_endpoint} refused the key pair for bucket {place.bucket!r}: "
                f"{aws_error_reason(exc)}",
            ) from None
        if error_code(exc) in ("404", "NoSuchBucket"):
            raise ConfigError(
                f"{section}.path", f"bucket {place.bucket!r} does not exist at {target.shown_endpoint}"
            ) from None
        raise ObjectSinkError(f"{place.url} at {target.shown_endpoint}: {aws_error_reason(exc)}") from exc
    return client


@dataclass
class _Upload:
    """A multipart upload staged under its final key, not yet completed (not visible)."""

    key: str
    upload_id: str
    parts: list[dict[str, Any]] = field(default_factory=list[dict[str, Any]])


class _Store:
    """The S3 calls of a sink on one bucket, each AWS error made an ObjectSinkError."""

    def __init__(self, client: S3Client, place: S3Place) -> None:
        self.client = client
        self.place = place

    def fail(self, what: str, exc: BaseException) -> ObjectSinkError:
        return ObjectSinkError(f"{self.place.url}: {what} failed: {aws_error_reason(exc)}")

    def stage(self, files: list[tuple[Path, Path]], uploads: list[_Upload]) -> None:
        """Uploads each file under its key as a multipart upload left open (added to
        ``uploads`` as it starts, so a failure half way can abort it)."""
        bucket = self.place.bucket
        for local, relative in files:
            key = self.place.key(relative)
            try:
                started = self.client.create_multipart_upload(Bucket=bucket, Key=key)
                upload = _Upload(key, started["UploadId"])
                uploads.append(upload)
                with local.open("rb") as f:
                    for number, chunk in enumerate(_chunks(f), start=1):
                        part = self.client.upload_part(
                            Bucket=bucket, Key=key, UploadId=upload.upload_id, PartNumber=number, Body=chunk
                        )
                        upload.parts.append({"PartNumber": number, "ETag": part["ETag"]})
            except AWS_ERRORS as exc:
                raise self.fail(f"uploading {key}", exc) from exc

    def complete(self, uploads: list[_Upload]) -> None:
        for upload in uploads:
            try:
                self.client.complete_multipart_upload(
                    Bucket=self.place.bucket,
                    Key=upload.key,
                    UploadId=upload.upload_id,
                    MultipartUpload={"Parts": upload.parts},  # pyright: ignore[reportArgumentType]
                )
            except AWS_ERRORS as exc:
                raise self.fail(f"completing {upload.key}", exc) from exc

    def abort(self, uploads: list[_Upload]) -> None:
        """Best effort: an upload left open is aborted by the run's next attempt."""
        for upload in uploads:
            with contextlib.suppress(*AWS_ERRORS):
                self.client.abort_multipart_upload(
                    Bucket=self.place.bucket, Key=upload.key, UploadId=upload.upload_id
                )

    def abort_debris(self, is_debris: Callable[[str], bool]) -> None:
        """Aborts the open uploads under the prefix whose key ``is_debris``: those an attempt
        that died left behind (invisible, but stored and billed)."""
        try:
            pages = self.client.get_paginator("list_multipart_uploads").paginate(
                Bucket=self.place.bucket, Prefix=self.place.folder
            )
            for page in pages:
                for upload in page.get("Uploads", []):
                    key, upload_id = upload.get("Key", ""), upload.get("UploadId", "")
                    if is_debris(key.rpartition("/")[2]):
                        self.client.abort_multipart_upload(
                            Bucket=self.place.bucket, Key=key, UploadId=upload_id
                        )
        except AWS_ERRORS as exc:
            raise self.fail("aborting earlier uploads", exc) from exc

    def listed(self, under: str = "") -> list[str]:
        try:
            pages = self.client.get_paginator("list_objects_v2").paginate(
                Bucket=self.place.bucket, Prefix=self.place.folder + under
            )
            return [item.get("Key", "") for page in pages for item in page.get("Contents", [])]
        except AWS_ERRORS as exc:
            raise self.fail("listing", exc) from exc

    def delete(self, keys: list[str]) -> None:
        for start in range(0, len(keys), _DELETE_BATCH):
            batch = [{"Key": key} for key in keys[start : start + _DELETE_BATCH]]
            try:
                answer = self.client.delete_objects(
                    Bucket=self.place.bucket,
                    Delete={"Objects": batch, "Quiet": True},  # pyright: ignore[reportArgumentType]
                )
            except AWS_ERRORS as exc:
                raise self.fail("deleting", exc) from exc
            errors = answer.get("Errors", [])
            if errors:
                first = errors[0]
                raise ObjectSinkError(
                    f"{self.place.url}: deleting {first.get('Key')} failed: "
                    f"{first.get('Code')}: {first.get('Message', '')}"
                )

    def put_json(self, key: str, value: object) -> None:
        try:
            self.client.put_object(Bucket=self.place.bucket, Key=key, Body=json.dumps(value).encode())
        except AWS_ERRORS as exc:
            raise self.fail(f"writing {key}", exc) from exc

    def manifest_files(self, key: str) -> list[str]:
        """The ``files`` of the manifest at ``key``, [] if there is none."""
        try:
            found: dict[str, list[str]] = json.loads(
                self.client.get_object(Bucket=self.place.bucket, Key=key)["Body"].read()
            )
        except AWS_ERRORS as exc:
            if error_code(exc) in ("NoSuchKey", "404"):
                return []
            raise self.fail(f"reading {key}", exc) from exc
        return found.get("files", [])


def _chunks(f: Any) -> Iterator[bytes]:
    """The file's bytes ``PART_BYTES`` at a time; one empty part for an empty file."""
    chunk: bytes = f.read(PART_BYTES)
    yield chunk
    while True:
        chunk = f.read(PART_BYTES)
        if not chunk:
            return
        yield chunk


def commit_objects(
    client: S3Client,
    place: S3Place,
    write_to: Callable[[str], None],
    count: Callable[[Path], int],
    *,
    attempt_key: str,
    publish: Publish,
) -> bool:
    """A bounded run: replaces everything under the prefix with what ``write_to(staging)``
    writes, through ``publish`` (see the module's docstring); returns whether it published.

    The files are named ``part-<attempt_key>...``: the open uploads of the run's other
    attempts (``part-<run>-<n>...``) are aborted before this one uploads."""
    store = _Store(client, place)
    run_prefix = f"part-{attempt_key.rsplit('-', 1)[0]}-"
    mine = f"part-{attempt_key}"
    store.abort_debris(lambda name: name.startswith(run_prefix) and not _named_by(name, mine))

    def swap_in(rows: int, uploads: list[_Upload]) -> Callable[[], None]:
        new_keys = sorted(upload.key for upload in uploads)

        def swap() -> None:
            store.delete([place.key(SUCCESS)])
            store.delete([key for key in store.listed() if key not in new_keys])
            store.complete(uploads)
            store.put_json(place.key(SUCCESS), {"attempt": attempt_key, "rows": rows, "files": new_keys})

        return swap

    return _publish_staged(
        store, write_to, count, publish, key=attempt_key, swap_in=swap_in, empty_files=True
    )


def append_objects(
    client: S3Client,
    place: S3Place,
    write_to: Callable[[str], None],
    count: Callable[[Path], int],
    *,
    epoch_key: str,
    publish: Publish,
) -> bool:
    """One epoch of a stream: adds what ``write_to(staging)`` writes under the prefix as
    ``part-<epoch_key>...`` objects, completed by ``publish``'s move; returns whether it
    published. A repeated epoch replaces its objects; the objects of an earlier attempt of
    the epoch that this one does not write again are deleted (its manifest lists them).
    An epoch without rows adds no object."""
    store = _Store(client, place)
    run_key, number = epoch_key.rsplit("-", 1)
    manifest = place.key(f"_epoch-{epoch_key}.json")
    _forget_earlier_epochs(store, run_key, number)

    def move_in(rows: int, uploads: list[_Upload]) -> Callable[[], None]:
        new_keys = sorted(upload.key for upload in uploads)

        def move() -> None:
            earlier = store.manifest_files(manifest)
            if new_keys or earlier:  # listed before completing, so a crash leaves no stranger
                store.put_json(manifest, {"files": sorted({*earlier, *new_keys})})
            store.complete(uploads)
            store.delete([key for key in earlier if key not in new_keys])
            if earlier:
                store.put_json(manifest, {"files": new_keys})

        return move

    return _publish_staged(store, write_to, count, publish, key=epoch_key, swap_in=move_in, empty_files=False)


def local_staging(key: str) -> Path:
    """The local directory where the write ``key`` (an attempt's or an epoch's key) stages
    its files before they are uploaded; named by the key, so its size can be measured while
    Spark writes (``files.sink``'s staging meter)."""
    return Path(tempfile.gettempdir()) / f"adf-s3-sink-{key}"


def _publish_staged(
    store: _Store,
    write_to: Callable[[str], None],
    count: Callable[[Path], int],
    publish: Publish,
    *,
    key: str,
    swap_in: Callable[[int, list[_Upload]], Callable[[], None]],
    empty_files: bool,
) -> bool:
    """Writes into a local staging directory, uploads its files named by ``key`` as open
    uploads, then lets ``publish`` run ``swap_in(rows, uploads)``'s swap; the uploads are
    aborted unless it published. ``empty_files``: whether a write without rows uploads the
    files it made (a bounded run's schema-only file) or none (a stream's empty epoch)."""
    uploads: list[_Upload] = []
    published = False
    scratch = local_staging(key)
    shutil.rmtree(scratch, ignore_errors=True)  # what a crashed attempt of the key left
    scratch.mkdir(parents=True)
    staging = scratch / "out"
    try:
        write_to(str(staging))
        rows = count(staging)
        store.stage(named_files(staging, key) if rows or empty_files else [], uploads)
        published = publish(rows, swap_in(rows, uploads))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        if not published:
            store.abort(uploads)
    return published


def _forget_earlier_epochs(store: _Store, run_key: str, number: str) -> None:
    """Deletes the manifests of the run's earlier epochs and aborts the uploads an earlier
    attempt of this or an earlier epoch left open: an epoch is only planned once the one
    before it committed, so those are all debris."""
    epoch_of = re.compile(rf"(?:part|_epoch)-{re.escape(run_key)}-(\d+)")

    def debris(name: str, *, this_one: bool) -> bool:
        match = epoch_of.match(name)
        if match is None or len(match.group(1)) != len(number):
            return False
        return match.group(1) < number or (this_one and match.group(1) == number)

    store.abort_debris(lambda name: debris(name, this_one=True))
    store.delete(
        [key for key in store.listed(f"_epoch-{run_key}-") if debris(key.rpartition("/")[2], this_one=False)]
    )


def _named_by(name: str, stem: str) -> bool:
    """Whether ``name`` is a file named ``stem`` (``stem.ext`` or ``stem-<n>.ext``)."""
    return re.match(rf"{re.escape(stem)}(-\d+)?\.", name) is not None
