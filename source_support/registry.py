"""Connector registry: each source and sink type, with the validator of its config.

The admin, the REST API and TOML files all validate through ``validate_source`` and
``validate_sink``, so a config is refused the same way, naming the same field, wherever it
comes from.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from source_support.api import Source
from source_support.errors import ConfigError
from source_support.formats import FormatSpec


@dataclass(frozen=True)
class Environment:
    """What validation and connectors may know of the deployment."""

    allowed_roots: tuple[Path, ...]
    base_dir: Path

    def resolve_path(self, value: str, field_name: str) -> Path:
        """An absolute path under one of the allowed roots, or a ConfigError naming the field."""
        path = Path(value)
        if not path.is_absolute():
            path = self.base_dir / path
        resolved = Path(_normpath(path))
        if not any(resolved == root or root in resolved.parents for root in self.allowed_roots):
            roots = ", ".join(str(r) for r in self.allowed_roots)
            raise ConfigError(field_name, f"{resolved} is outside the allowed roots ({roots})")
        return resolved

    def is_allowed(self, path: Path) -> bool:
        real = path.resolve()
        return any(real == root or root in real.parents for root in self.allowed_roots)


@dataclass(frozen=True)
class SourceConnector:
    type: str
    validate: Callable[[dict[str, Any], Environment], dict[str, Any]]
    build: Callable[..., Source]
    description: str = ""


@dataclass(frozen=True)
class SinkConnector:
    type: str
    validate: Callable[[dict[str, Any], Environment], dict[str, Any]]
    write: Callable[..., int]
    description: str = ""
    options: dict[str, Any] = field(default_factory=dict)


SOURCES: dict[str, SourceConnector] = {}
SINKS: dict[str, SinkConnector] = {}


def register_source(connector: SourceConnector) -> None:
    SOURCES[connector.type] = connector


def register_sink(connector: SinkConnector) -> None:
    SINKS[connector.type] = connector


def _lookup(table: dict, registry: dict, section: str) -> tuple[Any, dict[str, Any]]:
    table = dict(table)
    type_name = table.pop("type", None)
    known = ", ".join(sorted(registry))
    if not type_name:
        raise ConfigError(f"{section}.type", f"is required (one of: {known})")
    if type_name not in registry:
        raise ConfigError(f"{section}.type", f"unknown {section} type {type_name!r} (one of: {known})")
    return registry[type_name], table


def validate_source(table: dict[str, Any], env: Environment) -> tuple[str, dict[str, Any]]:
    connector, config = _lookup(table, SOURCES, "source")
    return connector.type, connector.validate(config, env)


def validate_sink(table: dict[str, Any], env: Environment) -> tuple[str, dict[str, Any]]:
    connector, config = _lookup(table, SINKS, "sink")
    return connector.type, connector.validate(config, env)


def build_source(type_name: str, config: dict[str, Any], fmt: FormatSpec, **options: Any) -> Source:
    return SOURCES[type_name].build(config, fmt, **options)


def check_fields(section: str, config: dict[str, Any], spec: dict[str, type | tuple]) -> None:
    """Refuses unknown fields and wrong types, naming the field."""
    for name, value in config.items():
        if name not in spec:
            raise ConfigError(f"{section}.{name}", f"is not a field of {section} ({', '.join(spec)})")
        expected = spec[name]
        types = expected if isinstance(expected, tuple) else (expected,)
        if isinstance(value, bool) and bool not in types:
            raise ConfigError(f"{section}.{name}", f"must be a {' or '.join(t.__name__ for t in types)}")
        if not isinstance(value, expected):
            names = (
                expected.__name__ if isinstance(expected, type) else " or ".join(t.__name__ for t in expected)
            )
            raise ConfigError(f"{section}.{name}", f"must be a {names}")


def _normpath(path: Path) -> str:
    import os

    return os.path.normpath(str(path))
