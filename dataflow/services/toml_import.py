"""Flows from TOML text: what ``manage.py applyflows`` reads from a file, for the admin's
import (a paste or an upload), through the same validation."""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from typing import Any

from dataflow.models import DataFlow
from dataflow.services.flows import flow_apply
from dataflow.services.notify import notify_unmasked
from source_support.errors import ConfigError
from source_support.registry import unmask_section

#: The longest TOML text taken: a spec is at most 256 KiB (``specs.MAX_SPEC_CHARS``), and
#: a file much larger is not a flow, so it is not parsed at all.
MAX_TOML_CHARS = 1024 * 1024


def flow_spec_from_toml(text: str) -> dict[str, Any]:
    """The spec a TOML text holds, not yet validated; a ConfigError (field ``toml``) says
    why a text is not TOML."""
    if len(text) > MAX_TOML_CHARS:
        raise ConfigError("toml", f"is too large: {len(text):,} characters, at most {MAX_TOML_CHARS:,}")
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError("toml", f"not valid TOML: {exc}") from None
    except RecursionError:
        # tomllib recurses per nested array or inline table
        raise ConfigError("toml", "not a flow spec: its values are nested too deeply") from None


#: ``${NAME}`` or ``${NAME:-default}`` in a string of an operator's TOML file (``$${`` is a
#: literal ``${``), as docker compose reads its files.
_ENV_REFERENCE = re.compile(r"\$(\$)?\{([A-Za-z_][A-Za-z0-9_]*)(:-([^}]*))?\}")


def flow_spec_with_environment(*, spec: Any, environ: Mapping[str, str], where: str = "") -> Any:
    """``spec`` with each ``${NAME}`` in its strings replaced by the environment variable
    NAME, or by the default after ``:-`` when NAME is unset or empty. For the operator's
    own files only (``applyflows``): a TOML text a user pastes or uploads is never expanded,
    or it could read the service's environment. A ConfigError names the field of a
    reference to a variable that is unset and has no default."""
    if isinstance(spec, dict):
        return {
            k: flow_spec_with_environment(spec=v, environ=environ, where=f"{where}.{k}" if where else k)
            for k, v in spec.items()
        }
    if isinstance(spec, list):
        return [flow_spec_with_environment(spec=v, environ=environ, where=where) for v in spec]
    if not isinstance(spec, str):
        return spec

    def value(match: re.Match[str]) -> str:
        escaped, name, has_default, default = match.groups()
        if escaped:
            return match.group(0)[1:]
        if environ.get(name):
            return environ[name]
        if has_default:
            return default
        raise ConfigError(
            where, f"${{{name}}} is not set in the environment (or give a default: ${{{name}:-...}})"
        )

    return _ENV_REFERENCE.sub(value, spec)


def flow_spec_from_toml_bytes(data: bytes) -> dict[str, Any]:
    """As ``flow_spec_from_toml``, for an uploaded file (TOML is UTF-8)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError("toml", f"not UTF-8 text (byte {exc.start}): a TOML file is UTF-8") from None
    return flow_spec_from_toml(text.removeprefix("\ufeff"))


def flow_import(*, spec: dict[str, Any], owner=None) -> tuple[DataFlow, bool]:
    """Creates or updates the flow a parsed TOML spec names, as ``applyflows`` does;
    returns (flow, created). A secret left as an export masked it is the stored flow's
    secret again, so an exported file imports back over its flow unchanged."""
    flow = _flow_named(spec)
    if flow is not None:
        spec = _with_stored_secrets(spec, flow)
    return flow_apply(spec=spec, owner=owner)


def _flow_named(spec: Any) -> DataFlow | None:
    name = (
        spec.get("flow", {}).get("name")
        if isinstance(spec, dict) and isinstance(spec.get("flow"), dict)
        else None
    )
    return DataFlow.objects.filter(name=name).first() if isinstance(name, str) else None


def _with_stored_secrets(spec: dict[str, Any], flow: DataFlow) -> dict[str, Any]:
    stored = {
        "source": {"type": flow.source_type, **flow.source_config},
        "format": {"type": flow.format_type, **flow.format_options},
        "sink": {"type": flow.sink_type, **flow.sink_config},
    }
    spec = dict(spec)
    for section, table in stored.items():
        if isinstance(spec.get(section), dict):
            spec[section] = unmask_section(section, spec[section], table)
    if isinstance(spec.get("notify"), dict) and flow.notify:
        spec["notify"] = notify_unmasked(spec["notify"], flow.notify)
    return spec
