"""The JSON parser of the API: bounded in size, strict, and refusing what cannot be stored."""

from __future__ import annotations

import codecs
import json

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser


class BoundedJSONParser(JSONParser):
    """DRF's JSONParser reads a body of any size (Django's DATA_UPLOAD_MAX_MEMORY_SIZE
    only guards ``request.body`` and forms): this one reads at most that many bytes and
    raises RequestDataTooBig (413) beyond. NaN and Infinity, nesting too deep for the
    decoder, NUL characters and lone surrogates (PostgreSQL stores neither) are a 400."""

    def parse(self, stream, media_type=None, parser_context=None):
        parser_context = parser_context or {}
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        request = parser_context.get("request")
        declared = _content_length(request)
        if limit is not None and declared is not None and declared > limit:
            raise RequestDataTooBig(f"the request body is {declared:,} bytes, at most {limit:,}")
        body = stream.read() if limit is None else stream.read(limit + 1)
        if limit is not None and len(body) > limit:
            raise RequestDataTooBig(f"the request body is larger than {limit:,} bytes")
        encoding = parser_context.get("encoding", settings.DEFAULT_CHARSET)
        try:
            text = codecs.decode(body, encoding)
            data = json.loads(text, parse_constant=_refuse_constant)
        except (ValueError, RecursionError) as exc:
            raise ParseError(f"JSON parse error - {exc}") from None
        _check_storable(data)
        return data


def _content_length(request) -> int | None:
    if request is None:
        return None
    meta = request.META
    try:
        return int(meta.get("CONTENT_LENGTH") or meta.get("HTTP_CONTENT_LENGTH") or 0) or None
    except (TypeError, ValueError):
        return None


def _refuse_constant(name: str):
    raise ValueError(f"{name} is not valid JSON")


def _check_storable(data) -> None:
    """Refuses strings (values or keys) that PostgreSQL cannot store; iterative, so deep
    nesting that the decoder accepted costs no recursion here."""
    pending = [data]
    while pending:
        value = pending.pop()
        if isinstance(value, dict):
            pending.extend(value.keys())
            pending.extend(value.values())
        elif isinstance(value, list):
            pending.extend(value)
        elif isinstance(value, str):
            if "\x00" in value:
                raise ParseError("JSON parse error - a string holds a NUL character (\\u0000)")
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise ParseError(
                    "JSON parse error - a string holds a lone surrogate (\\ud800-\\udfff)"
                ) from None
