"""An S3 object read as a file: seekable, streamed through ranged GETs.

The formats of the files connector read a binary file (``source_support.lines``); this is
that file over an object. Bytes come from GETs of ``RANGE_BYTES`` each, streamed into the
reader's buffer as it asks (no per-line request, and memory that does not grow with the
object). Every GET names the ETag the object was discovered with (``If-Match``), so an
object rewritten under the same key while it is read is refused by the server itself
(``ObjectChanged``), never mixed with its older version.

A GET or a read of its body that fails for the network (the server went away) is tried
again from the same byte, with backoff, ``ATTEMPTS`` times; then ``ObjectUnavailable``.
"""

from __future__ import annotations

import contextlib
import io
import logging
import time
from typing import TYPE_CHECKING, Any

import botocore.exceptions
import urllib3.exceptions

from connectors.aws.session import AWS_ERRORS, aws_error_reason, error_code
from source_support.formats import ReadError

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

logger = logging.getLogger(__name__)

#: The most bytes one GET asks for. Its body is streamed into the buffer as the reader
#: asks, so memory does not grow with it, and a GET that breaks is asked again from the
#: byte reached: a long range costs nothing but saves requests (the S3 stand-in, moto,
#: copies the whole object for every ranged GET: 8 MB ranges cost it 15 times the CPU of
#: one GET of a 130 MB object).
RANGE_BYTES = 256 << 20
#: The first GET of an object: a look at its head (a header, a format's first bytes) costs
#: no more than this.
FIRST_RANGE_BYTES = 1 << 20
#: The reader's buffer over the GETs' bodies.
BUFFER_BYTES = 1 << 20
ATTEMPTS = 5
BACKOFF_S = 0.2
MAX_BACKOFF_S = 2.0
#: Errors of a GET's answer that say the server is away or overloaded (tried again).
RETRIED_CODES = frozenset({"500", "502", "503", "504", "InternalError", "ServiceUnavailable", "SlowDown"})
#: Errors that say the object is not there (a HEAD's 404 has no code of its own).
MISSING_CODES = frozenset({"NoSuchKey", "404"})
#: What reading a GET's body raises when the connection breaks.
STREAM_ERRORS: tuple[type[BaseException], ...] = (
    botocore.exceptions.BotoCoreError,
    urllib3.exceptions.HTTPError,
    OSError,
)


class ObjectChanged(ReadError):
    """The object is no longer the one discovered (another ETag): its split fails."""


class ObjectUnavailable(OSError):
    """The server did not answer after ``ATTEMPTS`` tries: the split is read again later
    from its checkpoint."""


def object_url(bucket: str, key: str) -> str:
    return f"s3://{bucket}/{key}"


def parse_object_url(url: str) -> tuple[str, str]:
    """(bucket, key) of ``s3://bucket/key``."""
    bucket, _, key = url.removeprefix("s3://").partition("/")
    return bucket, key


class S3ObjectRaw(io.RawIOBase):
    """The bytes of one object (``etag``, ``size``: as discovered, None: as it is now)."""

    def __init__(
        self,
        client: S3Client,
        bucket: str,
        key: str,
        *,
        etag: str | None = None,
        size: int | None = None,
        sleep: Any = time.sleep,
    ) -> None:
        super().__init__()
        self.client, self.bucket, self.key = client, bucket, key
        self.etag, self.size = etag, size
        self.sleep = sleep
        self.position = 0
        self.body: Any = None
        #: Where the open GET's range ends (exclusive).
        self.body_end = 0
        self.gets = 0

    @property
    def url(self) -> str:
        return object_url(self.bucket, self.key)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if whence == io.SEEK_CUR:
            offset += self.position
        elif whence == io.SEEK_END:
            offset += self._size()
        if offset != self.position:
            self._drop_body()
            self.position = max(0, offset)
        return self.position

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        if not len(view) or (self.size is not None and self.position >= self.size):
            return 0
        failures = 0
        while True:
            try:
                body = self.body if self.body is not None else self._get()
                if body is None:
                    return 0  # past the end of an object whose size was not known
                data: bytes = body.read(min(len(view), self.body_end - self.position))
            except (ObjectChanged, FileNotFoundError):
                raise
            except STREAM_ERRORS as exc:
                if isinstance(exc, botocore.exceptions.ClientError) and error_code(exc) not in RETRIED_CODES:
                    raise ReadError(f"{self.url}: {aws_error_reason(exc)}") from None
                self._drop_body()
                failures += 1
                if failures == ATTEMPTS:
                    raise ObjectUnavailable(
                        f"{self.url}: {aws_error_reason(exc)} (tried {ATTEMPTS} times from byte {self.position})"
                    ) from None
                logger.info("reading %s at byte %s failed (%s); trying again", self.url, self.position, exc)
                self.sleep(min(MAX_BACKOFF_S, BACKOFF_S * 2 ** (failures - 1)))
                continue
            if data:
                view[: len(data)] = data
                self.position += len(data)
                return len(data)
            # The range is read (or its body ended early): the next GET goes on from here.
            ended_early = self.position < self.body_end
            self._drop_body()
            if self.size is not None and self.position >= self.size:
                return 0
            if ended_early:
                failures += 1
                if failures == ATTEMPTS:
                    raise ObjectUnavailable(
                        f"{self.url}: the server ended every range early at byte {self.position}"
                    )

    def _get(self) -> Any:
        """Opens a GET of the next range and returns its body; None when the position is
        past the object's end."""
        length = RANGE_BYTES if self.gets else FIRST_RANGE_BYTES
        end = self.position + length
        if self.size is not None:
            end = min(end, self.size)
        arguments: dict[str, Any] = {
            "Bucket": self.bucket,
            "Key": self.key,
            "Range": f"bytes={self.position}-{end - 1}",
        }
        if self.etag is not None:
            arguments["IfMatch"] = self.etag
        try:
            answer = self.client.get_object(**arguments)
        except botocore.exceptions.ClientError as exc:
            code = error_code(exc)
            if code in MISSING_CODES:
                raise FileNotFoundError(self._deleted()) from None
            if code in ("PreconditionFailed", "412"):
                raise ObjectChanged(self._change()) from None
            if code in ("InvalidRange", "416"):
                return None
            raise
        etag = answer.get("ETag", "")
        if self.etag is not None and etag and etag != self.etag:  # a server that ignores If-Match
            answer["Body"].close()
            raise ObjectChanged(self._change(etag))
        self.gets += 1
        self.body = answer["Body"]
        self.body_end = self.position + int(answer.get("ContentLength", end - self.position))
        return self.body

    def _change(self, now: str | None = None) -> str:
        """What changed, in words naming the object."""
        if now is None:
            try:
                now = self.client.head_object(Bucket=self.bucket, Key=self.key).get("ETag")
            except AWS_ERRORS:
                now = None
        seen = f"ETag {self.etag} -> {now}" if now else f"no longer ETag {self.etag}"
        return (
            f"{self.url} changed while it was read ({seen}): it was rewritten under the same key; "
            "re-run the flow once the object is complete"
        )

    def _size(self) -> int:
        if self.size is None:
            try:
                self.size = self.client.head_object(Bucket=self.bucket, Key=self.key)["ContentLength"]
            except botocore.exceptions.ClientError as exc:
                if error_code(exc) in MISSING_CODES:
                    raise FileNotFoundError(self._deleted()) from None
                raise
        return self.size

    def _deleted(self) -> str:
        return f"{self.url}: the object was deleted after it was discovered"

    def _drop_body(self) -> None:
        if self.body is not None:
            body, self.body = self.body, None
            with contextlib.suppress(*STREAM_ERRORS):
                body.close()

    def close(self) -> None:
        self._drop_body()
        super().close()


def open_object(
    client: S3Client, bucket: str, key: str, *, etag: str | None = None, size: int | None = None
) -> io.BufferedReader:
    """The object as a buffered binary file (``read``, ``readline``, ``seek``)."""
    return io.BufferedReader(S3ObjectRaw(client, bucket, key, etag=etag, size=size), BUFFER_BYTES)
