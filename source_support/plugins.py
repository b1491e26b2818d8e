"""Connector plugins: every source, sink and format type is registered by an entry point
of the group ``activedataflow.connectors``, the built-in ones too (``pyproject.toml``).

An entry point names a callable, called with no arguments, that registers its types
(``register_source``, ``register_sink``, ``register_format``, ``register_connection_kind``), or a module that does so when
imported::

    [project.entry-points."activedataflow.connectors"]
    nats = "connectors.nats:register"

So a connector can ship as a pip package of its own. When this repository runs from a
checkout that is not installed (``pip install -e .`` makes it one), its own entry points
are read from its ``pyproject.toml``; when it is installed, that file still wins over the
installed metadata of the same project, which ``pip install`` wrote at some earlier time.

A plugin that fails to load registers nothing (what it had registered is taken back), is
logged with its traceback, and is listed in ``FAILED_PLUGINS`` with the entry point's
name and value: the other connectors stay usable, and a flow that names one of its types
is refused with a message saying which plugin failed.
"""

from __future__ import annotations

import importlib.metadata
import logging
import re
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

from source_support.connections import CONNECTION_KINDS
from source_support.formats.registry import FORMAT_ALIASES, FORMATS
from source_support.registry import FAILED_PLUGINS, SINKS, SOURCES

GROUP = "activedataflow.connectors"
#: This project's name in ``pyproject.toml`` (its own entry points are read from there).
PROJECT = "activedataflow"
#: The checkout's ``pyproject.toml``, when this package runs from one.
OWN_PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"

_T = TypeVar("_T")
log = logging.getLogger("source_support.plugins")

#: The entry points loaded (or failed) already, by ``name = value``: loading is done once.
_DONE: set[str] = set()


@dataclass(frozen=True)
class PluginFailure:
    """A connector plugin that could not be loaded."""

    entry_point: str
    reason: str


def connector_entry_points(pyproject: Path = OWN_PYPROJECT) -> list[importlib.metadata.EntryPoint]:
    """The entry points of the group: this checkout's own (from ``pyproject``, when it is this
    project's), then those of every installed distribution but this project."""
    own = _pyproject_entry_points(pyproject)
    installed = importlib.metadata.entry_points(group=GROUP)
    if own is None:
        return list(installed)
    others = [ep for ep in installed if ep.dist is None or _normalized(ep.dist.name) != PROJECT]
    return own + others


def load_connectors(pyproject: Path = OWN_PYPROJECT) -> list[PluginFailure]:
    """Loads each connector plugin not loaded yet; the failures of this call (also logged,
    and kept in ``FAILED_PLUGINS``)."""
    failures: list[PluginFailure] = []
    for entry_point in connector_entry_points(pyproject):
        label = f"{entry_point.name} = {entry_point.value}"
        if label in _DONE:
            continue
        _DONE.add(label)
        failure = _load(entry_point, label)
        if failure is not None:
            failures.append(failure)
    return failures


def _load(entry_point: importlib.metadata.EntryPoint, label: str) -> PluginFailure | None:
    sources, sinks, formats, aliases = dict(SOURCES), dict(SINKS), dict(FORMATS), dict(FORMAT_ALIASES)
    kinds = dict(CONNECTION_KINDS)
    try:
        loaded: object = entry_point.load()
        if not isinstance(loaded, ModuleType):
            if not callable(loaded):
                raise TypeError(f"{entry_point.value} is neither a module nor a callable")
            register: Callable[[], Any] = loaded
            register()
    except Exception as exc:  # noqa: BLE001 - any error of a plugin is reported, never raised
        _restore(SOURCES, sources)  # a plugin registers all its types or none
        _restore(SINKS, sinks)
        _restore(FORMATS, formats)
        _restore(FORMAT_ALIASES, aliases)
        _restore(CONNECTION_KINDS, kinds)
        reason = f"{type(exc).__name__}: {exc}"
        FAILED_PLUGINS[label] = reason
        log.exception("connector plugin %s (entry point group %s) failed to load", label, GROUP)
        return PluginFailure(label, reason)
    return None


def _restore(registry: dict[str, _T], kept: dict[str, _T]) -> None:
    registry.clear()
    registry.update(kept)


def _pyproject_entry_points(pyproject: Path) -> list[importlib.metadata.EntryPoint] | None:
    """The group's entry points declared in ``pyproject``; None when it is not this
    project's ``pyproject.toml`` (or there is none)."""
    try:
        with pyproject.open("rb") as file:
            project = tomllib.load(file).get("project", {})
    except FileNotFoundError:
        return None
    if _normalized(str(project.get("name", ""))) != PROJECT:
        return None
    declared: dict[str, str] = project.get("entry-points", {}).get(GROUP, {})
    return [importlib.metadata.EntryPoint(name, value, GROUP) for name, value in declared.items()]


def _normalized(name: str) -> str:
    """A distribution name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()
