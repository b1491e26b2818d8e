"""What validation and connectors may know of the deployment: the allowed roots of paths,
the base directory, the deployment's Redis and a flow's named connections."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from source_support.connections import ConnectionTarget
from source_support.errors import ConfigError


@dataclass(frozen=True)
class ModelTable:
    """A Django model's table as a connector reads it: its schema and name, and the URL of
    the database its alias names."""

    schema: str
    name: str
    url: str


def _no_models(label: str, field_name: str) -> ModelTable:
    raise ConfigError(field_name, f"{label!r}: Django models are not known here")


@dataclass(frozen=True)
class Environment:
    """What validation and connectors may know of the deployment."""

    allowed_roots: tuple[Path, ...]
    base_dir: Path
    #: The deployment's Redis (a stream source's default ``url`` for staff and the operator).
    redis_url: str = ""
    #: The named connections of the flow being built, resolved (empty while validating).
    connections: Mapping[str, ConnectionTarget] = field(default_factory=dict[str, ConnectionTarget])
    #: Globs over the keys the deployment itself uses in its Redis (its queues, its
    #: namespace): no flow reads or writes one there, whatever its connection allows.
    reserved_keys: tuple[str, ...] = ()
    #: Whether a Redis URL names the deployment's own server (however it is written).
    is_deployment_redis: Callable[[str], bool] = field(default=lambda url: False)
    #: The deployment's own database when it is PostgreSQL (a postgres source's default
    #: for staff and the operator); empty otherwise.
    database_url: str = ""
    #: Globs over ``schema.table`` names the deployment itself uses (Django's, its own, the
    #: postgres sink's ledger and staging tables): never read or written by a flow.
    reserved_tables: tuple[str, ...] = ()
    #: ``model_table(label, field)``: the table and database of a Django model
    #: (``app_label.ModelName``), or a ConfigError naming ``field`` (resolved on the Django
    #: side: connectors know nothing of Django).
    model_table: Callable[[str, str], ModelTable] = field(default=_no_models)

    def reserved_keys_at(self, url: str) -> tuple[str, ...]:
        """The reserved globs on the Redis of ``url``: none on another server."""
        return self.reserved_keys if url == self.redis_url or self.is_deployment_redis(url) else ()

    def connection(self, name: str, field_name: str) -> ConnectionTarget:
        """The resolved connection ``name``, or a ConfigError naming ``field_name``."""
        target = self.connections.get(name)
        if target is None:
            raise ConfigError(field_name, f"connection {name!r} is not available to this flow")
        return target

    def resolve_path(self, value: str, field_name: str) -> Path:
        """The real path of ``value`` (symlinks resolved) under one of the allowed roots, or a
        ConfigError naming the field.

        A path that does not exist yet is the real path of its deepest existing ancestor plus
        the rest, so a symlink anywhere on the way counts.
        """
        path = Path(value)
        if not path.is_absolute():
            path = self.base_dir / path
        written = Path(os.path.normpath(path))
        real = real_path(written)
        if not self.is_under_root(real):
            roots = ", ".join(str(r) for r in self.allowed_roots)
            # Not where it leads: /proc/self/... would name the process (its pid), and a
            # link may point at what the user may not know of.
            through = " leads (through a symlink) to a place that" if real != written else ""
            raise ConfigError(field_name, f"{written}{through} is outside the allowed roots ({roots})")
        return real

    def real_roots(self) -> tuple[Path, ...]:
        return tuple(Path(os.path.realpath(root)) for root in self.allowed_roots)

    def is_under_root(self, real: Path) -> bool:
        """Whether a real (symlink-free) path is an allowed root or lies below one."""
        return any(real == root or root in real.parents for root in self.real_roots())

    def is_allowed(self, path: Path) -> bool:
        return self.is_under_root(real_path(path))

    def check_destructive_target(self, target: Path, field_name: str = "sink.path") -> None:
        """Refuses to replace or delete ``target`` unless it is, through every symlink, still
        below an allowed root (not a root itself), and is not itself a symlink.

        Called right before each destructive step (rename, rmtree) of a sink: a symlink made
        after validation must not redirect the step out of the roots. The staging and previous
        directories beside ``target`` share its parent, which is checked too.
        """
        target = Path(os.path.normpath(target))
        parent = Path(os.path.realpath(target.parent))
        real = parent / target.name
        if not self.is_under_root(parent):
            roots = ", ".join(str(r) for r in self.allowed_roots)
            raise ConfigError(
                field_name,
                f"{target} now leads (through a symlink) outside the allowed roots "
                f"({roots}); nothing was replaced",
            )
        if real in self.real_roots():
            raise ConfigError(
                field_name, f"{target} resolves to the allowed root {real}; nothing was replaced"
            )
        if os.path.islink(target):
            raise ConfigError(
                field_name,
                f"{target} is now a symlink (to {os.readlink(target)}); a sink replaces a directory, "
                "never a link: nothing was replaced",
            )


def real_path(path: Path) -> Path:
    """``os.path.realpath`` that is exact for a path not created yet: the real path of its
    deepest existing ancestor, plus the rest."""
    path = Path(os.path.normpath(path))
    missing: list[str] = []
    current = path
    while not os.path.lexists(current) and current != current.parent:
        missing.append(current.name)
        current = current.parent
    return Path(os.path.realpath(current)).joinpath(*reversed(missing))
