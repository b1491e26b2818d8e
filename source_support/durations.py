"""Durations and instants as users write them in flow files: ``"10 seconds"``, ``"500 ms"``,
``"2024-05-01T12:00:00Z"``."""

from __future__ import annotations

import re
from datetime import UTC, datetime

_UNITS_MS = {
    "ms": 1,
    "millisecond": 1,
    "milliseconds": 1,
    "s": 1000,
    "sec": 1000,
    "second": 1000,
    "seconds": 1000,
    "m": 60_000,
    "min": 60_000,
    "minute": 60_000,
    "minutes": 60_000,
    "h": 3_600_000,
    "hour": 3_600_000,
    "hours": 3_600_000,
    "d": 86_400_000,
    "day": 86_400_000,
    "days": 86_400_000,
}
_DURATION = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]+)\s*")


def parse_duration_ms(text: str) -> int:
    """Milliseconds in ``text`` (Spark's interval words: ``"10 seconds"``, ``"1 minute"``,
    also ``"500 ms"``, ``"2h"``); ValueError naming what is accepted otherwise."""
    match = _DURATION.fullmatch(text or "")
    unit = _UNITS_MS.get(match.group(2).lower()) if match else None
    if match is None or not unit:
        raise ValueError(f"{text!r} is not a duration such as '10 seconds', '500 ms' or '1 minute'")
    return round(float(match.group(1)) * unit)


def parse_instant_ms(text: str) -> int:
    """Milliseconds since the Unix epoch of an ISO-8601 time (``Z`` or an offset; a time
    without one is UTC); ValueError otherwise."""
    try:
        moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise ValueError(f"{text!r} is not an ISO-8601 time such as 2024-05-01T12:00:00Z") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)
