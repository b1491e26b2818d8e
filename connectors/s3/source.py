"""The s3 source: the objects of a bucket under a prefix, read in the formats of the
files connector (it is a files source whose files are objects)."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from connectors.aws.config import aws_target
from connectors.aws.session import AWS_ERRORS, aws_client, aws_error_reason, error_code, is_credential_error
from connectors.files.enumerator import COMPRESSED_SUFFIXES
from connectors.files.source import FileSource
from connectors.files.split import WHOLE_FILE, FileSplit
from connectors.s3.config import S3SourceConfig, key_regex
from connectors.s3.enumerator import Listing, S3Enumerator
from connectors.s3.objects import MISSING_CODES, object_url, open_object, parse_object_url
from connectors.s3.reader import S3SplitReader
from connectors.s3.split import S3Split, S3SplitSerializer
from source_support.api import Boundedness, SourceReaderContext, SplitEnumeratorContext
from source_support.connections import key_allowed, outside_words
from source_support.errors import ConfigError
from source_support.formats import FormatSpec, RecordFormat
from source_support.lines import RecordFile, open_records
from source_support.reader_base import SourceReaderBase
from source_support.registry import BuildContext

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

    from connectors.aws.config import AwsTarget

#: Objects whose header is checked when a run starts (each costs a GET).
HEADERS_CHECKED = 100


def s3_check_stop(config: object, stop: Mapping[str, Any]) -> None:
    """A watched s3 source stops at a time or at latest, never at an entry id."""
    if stop.get("kind") == "position":
        raise ConfigError("stop.at", "an entry id stops a stream; an s3 source stops at a time or at latest")


class S3Source(FileSource):
    """Bounded, or unbounded with ``watch``; splits are ``S3Split``s."""

    headers_checked = HEADERS_CHECKED

    def __init__(
        self,
        *,
        target: AwsTarget,
        listing: Listing,
        fmt: RecordFormat,
        split_size: int,
        context: BuildContext,
        watch: bool,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(
            pattern=object_url(listing.bucket, listing.prefix),
            fmt=fmt,
            split_size=split_size,
            env=context.env,
            batch_size=context.batch_size,
            stop=context.stop,
            clock=clock,
        )
        self.target = target
        self.listing = listing
        self.watching = watch

    @classmethod
    def from_s3_config(cls, config: S3SourceConfig, fmt: FormatSpec, context: BuildContext) -> S3Source:
        s3_check_stop(config, context.stop)
        record_format = fmt.build(context.schema, env=context.env)
        if not isinstance(record_format, RecordFormat):
            raise ConfigError("format.type", "this source reads objects as files: use csv or jsonl")
        target = aws_target(config, context.env)
        listing = Listing(config.bucket, config.prefix, key_regex(config.pattern), target.key_patterns)
        return cls(
            target=target,
            listing=listing,
            fmt=record_format,
            split_size=max(1, int(config.split_size_mb * (1 << 20))),
            context=context,
            watch=config.watch,
        )

    @functools.cached_property
    def client(self) -> S3Client:
        return aws_client(self.target, "s3")

    def _client(self) -> S3Client:
        return self.client

    @property
    def boundedness(self) -> Boundedness:
        return Boundedness.CONTINUOUS_UNBOUNDED if self.watching else Boundedness.BOUNDED

    def split_refusal(self, split: FileSplit) -> str | None:
        """An object its connection no longer allows (over ``bucket/key``) is not read."""
        bucket, key = parse_object_url(split.path)
        if key_allowed(f"{bucket}/{key}", self.listing.key_patterns):
            return None
        return outside_words(f"{bucket}/{key}", self.listing.key_patterns)

    @property
    def split_serializer(self) -> S3SplitSerializer:  # pyright: ignore[reportIncompatibleMethodOverride]
        return S3SplitSerializer()

    def create_enumerator(self, context: SplitEnumeratorContext[Any]) -> S3Enumerator:  # pyright: ignore[reportIncompatibleMethodOverride]
        return self.restore_enumerator(context, None)

    def restore_enumerator(  # pyright: ignore[reportIncompatibleMethodOverride]
        self, context: SplitEnumeratorContext[Any], state: dict[str, Any] | None
    ) -> S3Enumerator:
        return S3Enumerator(
            context,
            client=self._client,
            listing=self.listing,
            split_size=self.split_size,
            layout=self.layout,
            watch=self.watching,
            stop=self.stop,
            clock=self.clock,
            state=state,
        )

    def create_reader(self, context: SourceReaderContext) -> SourceReaderBase[FileSplit]:
        assert isinstance(self.fmt, RecordFormat)
        split_reader = S3SplitReader(
            self.fmt, self._client, first_bad_record_only=context.bad_record_fails_split
        )
        return SourceReaderBase(context, split_reader, batch_size=self.batch_size)

    def listed_paths(self) -> Iterable[str]:
        try:
            for info in self.listing.objects(self.client):
                yield object_url(self.listing.bucket, info.key)
        except AWS_ERRORS as exc:
            raise ConfigError(*self.refusal(exc)) from None

    def open_head(self, path: str) -> RecordFile:
        assert isinstance(self.fmt, RecordFormat)
        bucket, key = parse_object_url(path)
        return open_records(
            path,
            compressed=path.endswith(COMPRESSED_SUFFIXES),
            encoding=self.fmt.encoding,
            open_raw=lambda _: open_object(self.client, bucket, key),
        )

    def check_input(self) -> None:
        """Refuses a run whose endpoint does not answer, whose bucket is missing or whose
        credentials are refused, naming the field; then checks the CSV headers of the
        first objects against the schema, as the files source checks files."""
        try:  # a listing, not HEAD: its error names what is wrong (HEAD's has no body)
            self.client.list_objects_v2(Bucket=self.listing.bucket, Prefix=self.listing.prefix, MaxKeys=1)
        except AWS_ERRORS as exc:
            raise ConfigError(*self.refusal(exc)) from None
        super().check_input()

    def refusal(self, exc: BaseException) -> tuple[str, str]:
        """The field and reason of a failed call, naming no secret."""
        target = self.target
        reason = aws_error_reason(exc)
        code = error_code(exc)
        if is_credential_error(exc):
            field = target.field if target.field.endswith(".connection") else "source.access_key_id"
            return field, reason
        if code in ("NoSuchBucket", "404"):
            return "source.bucket", f"no bucket {self.listing.bucket!r} at {target.shown_endpoint}"
        if code in ("AccessDenied", "403"):
            return "source.bucket", f"access to bucket {self.listing.bucket!r} was refused ({code})"
        if code:
            return "source.bucket", reason
        return target.field, f"{target.shown_endpoint}: {reason}"

    def missing_inputs(self, splits: Sequence[FileSplit]) -> list[str]:
        """The objects of ``splits`` that are gone (a HEAD answered 404), each once; one
        the server does not answer for is not called missing."""
        missing: list[str] = []
        for path in dict.fromkeys(split.path for split in splits):
            bucket, key = parse_object_url(path)
            try:
                self.client.head_object(Bucket=bucket, Key=key)
            except AWS_ERRORS as exc:
                if error_code(exc) in MISSING_CODES:
                    missing.append(path)
        return missing

    def split_to_retry(self, split: FileSplit) -> FileSplit:
        """The split over the object as it is now: a whole object (gzip, or one range over
        all of it) takes its new ETag and size; a range of an object read in several must
        find it unchanged, or the ranges would no longer meet."""
        if not isinstance(split, S3Split):
            return split
        bucket, key = parse_object_url(split.path)
        try:
            head = self.client.head_object(Bucket=bucket, Key=key)
        except AWS_ERRORS:
            return split  # gone or away: the reader says so
        etag, size = head.get("ETag", ""), head.get("ContentLength", 0)
        if etag == split.etag:
            return split
        whole = split.compressed or split.end == WHOLE_FILE or (split.start == 0 and split.end == split.size)
        if not whole:
            raise ValueError(
                f"{split.path} was rewritten (ETag {split.etag} -> {etag}) and is read in several "
                "ranges, so the ranges after this one would no longer meet it"
            )
        end = split.end if split.compressed or split.end == WHOLE_FILE else size
        return S3Split(
            split.path,
            0,
            end,
            split.position,
            compressed=split.compressed,
            size=size,
            etag=etag,
        )
