"""The ``[source]`` table of an s3 source. Nothing here connects: a flow may be defined
before its endpoint is up (``S3Source.check_input`` connects when a run starts)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, Self

from connectors.aws.config import AwsAddress
from source_support.config import option
from source_support.errors import ConfigError
from source_support.registry import Environment

#: S3's bucket names (3 to 63 lowercase letters, digits, dots and hyphens; MinIO's too).
BUCKET_RE = re.compile(r"[a-z0-9][a-z0-9.\-_]{1,61}[a-z0-9]")
#: An object key is at most 1024 bytes.
MAX_KEY_BYTES = 1024


class S3SourceConfig(AwsAddress):
    """A validated ``[source]`` table of an s3 source."""

    @classmethod
    def address_keys(cls, table: Mapping[str, Any]) -> list[tuple[str, str]] | None:
        """bucket and prefix, checked against a connection's key patterns together as
        ``bucket/prefix*``; a refusal names the prefix (the bucket when there is none)."""
        prefix = table.get("prefix") or ""
        return [("prefix" if prefix else "bucket", f"{table.get('bucket', '')}/{prefix}*")]

    bucket: str = option("The bucket to read.", example="events")
    prefix: str = option(
        "Only keys that start with this are read (a folder: end it with /); empty: the whole bucket.",
        default="",
        example="2026/11/",
    )
    pattern: str = option(
        "A glob over the keys below prefix (relative to it) that are read: * within a /-separated "
        "part, ** across parts, ? one character, [abc] one of them; keys ending in .gz are gunzipped.",
        default="**",
        example="**/*.csv.gz",
    )
    allow_empty: bool = option(
        "Whether a prefix and pattern that match no object, or only objects without a record, give "
        "an empty result instead of failing the run.",
        default=False,
    )
    watch: bool = option(
        "Whether objects put later are read too, as they come (the flow then runs until stopped or "
        "its stop rule).",
        default=False,
    )
    split_size_mb: int | float = option(
        "The size in MB (greater than 0) of the byte ranges a large uncompressed object is cut into, "
        "so that several readers share it.",
        default=64,
        minimum=0,
    )

    def validate(self, env: Environment) -> Self:
        bucket = self.bucket.strip()
        if not BUCKET_RE.fullmatch(bucket) or ".." in bucket:
            raise ConfigError(
                "source.bucket",
                f"{bucket!r} is not a bucket name (3 to 63 lowercase letters, digits, dots and hyphens)",
            )
        if self.prefix.startswith("/"):
            raise ConfigError("source.prefix", "keys do not start with /: leave the leading / out")
        if len(self.prefix.encode()) > MAX_KEY_BYTES:
            raise ConfigError("source.prefix", f"is longer than a key may be ({MAX_KEY_BYTES} bytes)")
        pattern = self.pattern.strip()
        if not pattern or pattern.startswith("/"):
            raise ConfigError(
                "source.pattern", "must be a glob over keys relative to prefix, such as **/*.csv.gz"
            )
        try:
            key_regex(pattern)
        except re.error as exc:
            raise ConfigError("source.pattern", f"{pattern!r} is not a glob: {exc}") from None
        if self.split_size_mb <= 0:
            raise ConfigError("source.split_size_mb", "must be greater than 0")
        return replace(super().validate(env), bucket=bucket, pattern=pattern)


def key_regex(pattern: str) -> re.Pattern[str]:
    """The regular expression of a glob over keys: ``*`` and ``?`` stay within a
    /-separated part, ``**`` spans parts (``**/`` also none), ``[...]`` is a class."""
    out: list[str] = []
    i = 0
    while i < len(pattern):
        char = pattern[i]
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif char == "*":
            out.append("[^/]*")
            i += 1
        elif char == "?":
            out.append("[^/]")
            i += 1
        elif char == "[":
            close = pattern.find("]", i + 2 if pattern.startswith(("[!", "[^"), i) else i + 1)
            if close < 0:
                out.append(re.escape(char))
                i += 1
                continue
            body = pattern[i + 1 : close]
            if body.startswith("!"):
                body = "^" + body[1:]
            out.append(f"[{body}]")
            i = close + 1
        else:
            out.append(re.escape(char))
            i += 1
    return re.compile("".join(out), re.DOTALL)
