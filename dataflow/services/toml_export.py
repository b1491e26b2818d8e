"""A flow as a TOML file: the spec ``applyflows`` and the admin's import take back.

No TOML writer is installed (``tomllib`` only reads), and a flow spec needs little of TOML:
tables of strings, numbers, booleans, lists and inline tables. So it is written here.
"""

from __future__ import annotations

import math
import re
from typing import Any

from django.conf import settings

from dataflow.models import DataFlow
from dataflow.services.notify import notify_masked
from dataflow.services.specs import flow_spec_of
from source_support.registry import mask_section, paths_relative_section

#: Sections in the order a reader expects them; any other section of the spec follows.
SECTION_ORDER = ("flow", "source", "format", "transform", "sink", "stop", "schedule", "notify")
BARE_KEY_RE = re.compile(r"[A-Za-z0-9_-]+")
#: Characters a TOML basic string must escape, besides the control characters.
ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}


def flow_toml(*, flow: DataFlow, reveal_secrets: bool = False) -> str:
    """The flow's spec as TOML that ``tomllib`` reads back into the same spec.

    Secrets (a password, the credentials of a URL, a webhook's query) are masked as the admin shows them
    unless ``reveal_secrets``; importing the file over the same flow keeps its stored
    secrets (see ``toml_import.flow_import``). Paths under ``DATAFLOW_BASE_DIR`` are
    written relative to it (others stay absolute), so the file applies in another
    checkout or deployment with its own base directory."""
    spec = flow_spec_of(flow)
    for section in ("source", "format", "sink"):
        spec[section] = paths_relative_section(section, spec[section], settings.DATAFLOW_BASE_DIR)
        if not reveal_secrets:
            spec[section] = mask_section(section, spec[section])
    if spec.get("notify") and not reveal_secrets:
        spec["notify"] = notify_masked(spec["notify"])  # a webhook's ?token= as the API shows it
    lines = [f"# Flow {flow.name}: apply with `manage.py applyflows {flow.name}.toml` or the admin's import."]
    if not reveal_secrets:
        lines.append("# Secrets are masked; importing this file over the same flow keeps its stored ones.")
    return "\n".join(lines) + "\n" + spec_toml(spec)


def spec_toml(spec: dict[str, Any]) -> str:
    """A spec (sections of fields) as TOML; fields whose value is None are left out (TOML
    has no null, and a left-out field means the same to the validator)."""
    order = [s for s in SECTION_ORDER if s in spec] + [s for s in spec if s not in SECTION_ORDER]
    parts = []
    for section in order:
        table = spec[section]
        if not table:
            continue  # an empty optional section says nothing
        if isinstance(table, list):  # an array of tables: [[expect]]
            parts += [f"[[{_key(section)}]]\n{_fields(item)}" for item in table]
            continue
        parts.append(f"[{_key(section)}]\n{_fields(table)}")
    return "\n".join(parts)


def _fields(table: dict[str, Any]) -> str:
    return "".join(f"{_key(k)} = {toml_value(v)}\n" for k, v in table.items() if v is not None)


def toml_value(value: Any) -> str:
    """One value in TOML: a string (multi-line when it holds line breaks), an integer, a
    float, a boolean, an array or an inline table."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _float(value)
    if isinstance(value, str):
        return _multiline(value) if "\n" in value else _basic(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_value(v) for v in value if v is not None) + "]"
    if isinstance(value, dict):
        items = ", ".join(f"{_key(k)} = {toml_value(v)}" for k, v in value.items() if v is not None)
        return "{ " + items + " }" if items else "{}"
    raise TypeError(f"a flow spec holds no {type(value).__name__} ({value!r})")


def _key(name: str) -> str:
    return name if BARE_KEY_RE.fullmatch(name) else _basic(name)


def _float(value: float) -> str:
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return repr(value)  # always has a "." or an exponent: stays a float


def _escape(char: str) -> str:
    if char in ESCAPES:
        return ESCAPES[char]
    if ord(char) < 0x20 or ord(char) == 0x7F:
        return f"\\u{ord(char):04x}"
    return char


def _basic(text: str) -> str:
    return '"' + "".join(_escape(c) for c in text) + '"'


def _multiline(text: str) -> str:
    # Line breaks stay as they are, so a query reads as it was written; everything else a
    # basic string escapes is escaped (a '"' too, so no '"""' can end the string early).
    body = "".join("\n" if c == "\n" else _escape(c) for c in text)
    return '"""\n' + body + '"""'
