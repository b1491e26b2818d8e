"""Named connections: staff make them and grant them; flows name them; runs resolve them.

Who may use what (the flow's *owner* decides, whoever edits the flow):

- a flow owned by a user who is not staff may reach an external system only through a
  connection granted to that user (directly or through a group); it may not give a raw
  address (``url``), and the deployment's own Redis is never its default;
- a flow owned by staff, or by no one (made by the operator at the shell), may give a raw
  ``url`` or leave it out (the deployment's Redis), as before connections, and may name any
  connection.

A staff user editing a non-staff user's flow is held to the owner's rules: the flow runs
as its owner, and each run start checks the owner's grants again (a revoked grant or a
deleted connection stops the start, naming ``source.connection`` or ``sink.connection``).

For a non-staff owner the connection's host is also checked against the address policy
(``services.addresses``) when the flow is saved and each time a run resolves it, and the
client connects to the address that was checked (``ConnectionKind.pinnable_schemes``).

A connection's ``key_patterns`` bound the keys its flows may name (checked conservatively
when a flow is saved, and again on every key a run finds or writes). A connection to the
deployment's own Redis must have patterns, and none may reach the deployment's keys
(``DATAFLOW_REDIS_NAMESPACE``, Celery's).

Secrets (``url``, ``password``) are stored as given (not encrypted: the database holds
flows' secrets the same way) and never returned: shown masked, and a masked value sent
back keeps the stored one.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.contrib.auth.models import Group
from django.db import transaction

from dataflow.models import Connection
from dataflow.redis_client import redis_url
from dataflow.services.addresses import url_address_check
from source_support import addresses
from source_support.connections import (
    CONNECTION_KINDS,
    ConnectionKind,
    ConnectionTarget,
    glob_within,
    prefixes_overlap,
    url_with_credentials,
    url_with_host,
)
from source_support.errors import ConfigError
from source_support.options import Option, mask_config, unmask_config
from source_support.registry import SINKS, SOURCES, address_option, section_options

#: The secrets of a connection, declared as options so the flows' masking helpers apply.
CONNECTION_SECRETS = (
    Option("url", str, "Where the system is, with credentials if it takes them.", secret="url"),
    Option("password", str, "A password, when the URL holds none.", default="", secret="value"),
)
NAME_RE = re.compile(r"[a-z0-9][a-z0-9_-]{0,99}")
MAX_PATTERNS = 100
MAX_PATTERN_CHARS = 512
#: Keys of the deployment itself besides its namespace: Celery's and kombu's.
BROKER_KEY_PREFIXES = ("celery", "_kombu", "unacked")


def connection_masked(connection: Connection) -> dict[str, str]:
    """The connection's secrets as they may be shown."""
    return mask_config(CONNECTION_SECRETS, {"url": connection.url, "password": connection.password})


@transaction.atomic
def connection_save(
    *,
    name: str,
    type: str,
    url: str,
    username: str = "",
    password: str = "",
    key_patterns: Iterable[str] = (),
    description: str = "",
    users: Iterable[Any] | None = None,
    groups: Iterable[Group] | None = None,
    connection: Connection | None = None,
) -> Connection:
    """Creates a connection or, given ``connection``, changes it (its name too). A secret
    sent back exactly as ``connection_masked`` showed it keeps the stored secret. Grants
    are replaced when ``users``/``groups`` are given. ConfigError names the field
    (``name``, ``type``, ``url``, ``key_patterns``) of what is refused."""
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise ConfigError("name", "must be lowercase letters, digits, '-' or '_' (at most 100)")
    taken = Connection.objects.filter(name=name)
    if connection is not None:
        taken = taken.exclude(pk=connection.pk)
    if taken.exists():
        raise ConfigError("name", f"a connection named {name!r} exists already")
    kind = CONNECTION_KINDS.get(type)
    if kind is None:
        raise ConfigError(
            "type", f"unknown connection type {type!r} (one of: {', '.join(sorted(CONNECTION_KINDS))})"
        )
    if connection is not None:
        stored = {"url": connection.url, "password": connection.password}
        secrets = unmask_config(CONNECTION_SECRETS, {"url": url, "password": password}, stored)
        url, password = secrets["url"], secrets["password"]
    if not isinstance(url, str) or not url.strip():
        raise ConfigError("url", f"is required: where the {type} server is")
    url = kind.validate_url(url.strip(), "url")
    patterns = _checked_patterns(key_patterns)
    _check_deployment_keys(kind, url, patterns, field="key_patterns")
    connection = connection or Connection()
    connection.name, connection.type, connection.url = name, type, url
    connection.username, connection.password = username or "", password or ""
    connection.key_patterns, connection.description = patterns, description or ""
    connection.save()
    if users is not None:
        connection.users.set(users)
    if groups is not None:
        connection.groups.set(groups)
    return connection


def connection_delete(*, connection: Connection) -> None:
    """Deletes the connection: flows that name it can no longer start (their stored
    spec keeps the name; granting a new connection of that name lets them start again)."""
    connection.delete()


def _checked_patterns(key_patterns: Iterable[str]) -> list[str]:
    if isinstance(key_patterns, str) or not isinstance(key_patterns, Iterable):
        raise ConfigError("key_patterns", 'must be a list of key globs, such as ["orders:*"]')
    patterns = list(key_patterns)
    if len(patterns) > MAX_PATTERNS:
        raise ConfigError("key_patterns", f"at most {MAX_PATTERNS} patterns")
    for pattern in patterns:
        if not isinstance(pattern, str) or not pattern.strip():
            raise ConfigError("key_patterns", "each pattern must be a non-empty string")
        if len(pattern) > MAX_PATTERN_CHARS or "\\" in pattern:
            raise ConfigError(
                "key_patterns",
                f"{pattern[:40]!r}: at most {MAX_PATTERN_CHARS} characters, no backslash escapes",
            )
    return patterns


def _check_deployment_keys(kind: ConnectionKind, url: str, patterns: list[str], *, field: str) -> None:
    """Refuses a connection to the deployment's own Redis unless its patterns keep every
    flow away from the deployment's keys (its namespace, Celery's)."""
    if kind.type != "redis" or not _is_deployment_redis(url):
        return
    reserved = (f"{settings.DATAFLOW_REDIS_NAMESPACE}:", *BROKER_KEY_PREFIXES)
    if not patterns:
        raise ConfigError(
            field,
            "are required: this is the deployment's own Redis; name the keys its flows may use "
            '(e.g. ["team-a:*"]), away from the deployment\'s own keys',
        )
    for pattern in patterns:
        clash = next((prefix for prefix in reserved if prefixes_overlap(pattern, prefix)), None)
        if clash is not None:
            raise ConfigError(
                field,
                f"{pattern!r} may match the deployment's own keys ({clash}...) on its own Redis; "
                "use a prefix of their own",
            )


def _is_deployment_redis(url: str) -> bool:
    """Whether ``url`` names the server of REDIS_URL or of the Celery broker (by socket
    path, or by resolved address and port)."""
    own = {redis_url(), getattr(settings, "CELERY_BROKER_URL", "") or ""}
    target = _endpoints(url)
    return any(target & _endpoints(other) for other in own if other)


def _endpoints(url: str) -> set[tuple[str, int]]:
    parts = urlsplit(url)
    if parts.scheme == "unix":
        return {(os.path.realpath(parts.path), 0)}
    try:
        host, port = parts.hostname or "localhost", parts.port or 6379
        infos = addresses.getaddrinfo(host, port, 0, 1)
    except (OSError, ValueError, UnicodeError):
        return set()
    return {(str(info[4][0]), port) for info in infos}


def is_restricted(owner) -> bool:
    """Whether the flows of ``owner`` are held to the rules of non-staff users (None: the
    operator's flows, which are not)."""
    return owner is not None and not (owner.is_staff or owner.is_superuser)


def flow_connections_check(doc: dict[str, Any], *, owner) -> None:
    """Checks the ``[source]`` and ``[sink]`` tables of a spec against the connection
    rules for ``owner`` (see the module's docstring); ConfigError naming the field."""
    for section, registry in (("source", SOURCES), ("sink", SINKS)):
        table = doc.get(section)
        if not isinstance(table, dict) or table.get("type") not in registry:
            continue  # the spec's own validation names what is wrong
        options = section_options(section, table["type"])
        address = address_option(options)
        if address is None:
            continue
        scope = SOURCES[table["type"]].scope if section == "source" else None
        _check_use(section, table, options, address, owner=owner, scope=scope)
    _check_format_addresses(doc.get("format"), owner=owner)


def _check_format_addresses(table: object, *, owner) -> None:
    """A format that reaches a network service (a schema registry's URL) has no connection
    kind of its own: only staff and the operator may give one."""
    if not isinstance(table, dict) or not is_restricted(owner):
        return
    for option in section_options("format", table.get("type")):
        if option.secret == "url" and table.get(option.name) is not None:
            raise ConfigError(
                f"format.{option.name}",
                "only staff may give an address here; ask staff to set it for you",
            )


def _check_use(
    section: str,
    table: dict[str, Any],
    options,
    address: Option,
    *,
    owner,
    scope: Callable[[dict[str, Any]], tuple[str, str]] | None = None,
) -> None:
    name = table.get("connection")
    restricted = is_restricted(owner)
    if name is None:
        if not restricted:
            return
        if table.get(address.name) is not None:
            raise ConfigError(
                f"{section}.{address.name}",
                f"only staff may give an address; name a connection granted to you in {section}.connection",
            )
        raise ConfigError(
            f"{section}.connection",
            f"is required: name a {address.address} connection granted to you "
            "(the service's own systems are not for user data)",
        )
    if not isinstance(name, str):
        raise ConfigError(f"{section}.connection", "must be a string: a connection's name")
    connection = _usable_connection(name, owner, field=f"{section}.connection", kind=address.address)
    for option in options:
        value = table.get(option.name)
        # A scoped option names one key or glob, or a list of them (NATS subject filters).
        for item in value if isinstance(value, list) else [value]:
            if option.scoped and isinstance(item, str) and not glob_within(item, connection.key_patterns):
                raise ConfigError(
                    f"{section}.{option.name}",
                    f"{item!r} may reach keys outside what connection {name!r} allows "
                    f"({', '.join(connection.key_patterns)})",
                )
    if scope is not None:
        field, keys = scope(table)
        if not glob_within(keys, connection.key_patterns):
            raise ConfigError(
                f"{section}.{field}",
                f"{keys!r} may reach keys outside what connection {name!r} allows "
                f"({', '.join(connection.key_patterns)})",
            )
    if restricted:
        _target_for_restricted(connection, field=f"{section}.connection")


def _usable_connection(name: str, owner, *, field: str, kind: str) -> Connection:
    connection = Connection.objects.filter(name=name).first()
    if connection is None or (
        is_restricted(owner) and not connection_granted(connection=connection, user=owner)
    ):
        granted = "granted to the flow's owner " if is_restricted(owner) else ""
        raise ConfigError(field, f"no connection named {name!r} is {granted}(see /api/connections/)")
    if connection.type != kind:
        raise ConfigError(
            field, f"{name!r} is a {connection.type} connection; this needs a {kind} connection"
        )
    return connection


def _target_for_restricted(connection: Connection, *, field: str) -> str:
    """The URL a non-staff user's flow connects to: its host checked by the address
    policy, and replaced by the checked address where the scheme allows."""
    kind = CONNECTION_KINDS[connection.type]
    url = connection.url
    scheme = urlsplit(url).scheme
    if scheme in kind.local_schemes:
        raise ConfigError(field, f"connection {connection.name!r} is a local socket: for staff flows only")
    checked = url_address_check(url, field=field, default_port=kind.default_port)
    if scheme in kind.pinnable_schemes:
        url = url_with_host(url, str(checked[0]))
    return url


def flow_connections_resolve(
    *, source_type: str, source_config: dict, sink_type: str, sink_config: dict, owner
) -> dict[str, ConnectionTarget]:
    """The connections a flow's source and sink name, resolved for a run (at its start
    and wherever the worker builds them), checked again for ``owner``: a revoked grant,
    a deleted connection or a refused address is a ConfigError naming the field."""
    targets: dict[str, ConnectionTarget] = {}
    for section, type_name, config in (
        ("source", source_type, source_config),
        ("sink", sink_type, sink_config),
    ):
        address = address_option(section_options(section, type_name))
        name = (config or {}).get("connection")
        if address is None:
            continue
        field = f"{section}.connection"
        if name is None:
            if is_restricted(owner):
                raise ConfigError(
                    field, f"is required: name a {address.address} connection granted to the owner"
                )
            continue
        connection = _usable_connection(name, owner, field=field, kind=address.address)
        kind = CONNECTION_KINDS[connection.type]
        _check_deployment_keys(kind, connection.url, list(connection.key_patterns), field=field)
        url = _target_for_restricted(connection, field=field) if is_restricted(owner) else connection.url
        targets[name] = ConnectionTarget(
            name=name,
            type=connection.type,
            url=url_with_credentials(url, connection.username, connection.password),
            key_patterns=tuple(connection.key_patterns),
        )
    return targets


def connection_granted(*, connection: Connection, user) -> bool:
    """Whether ``connection`` is granted to ``user`` (directly or through a group)."""
    return connection.users.filter(pk=user.pk).exists() or connection.groups.filter(user=user).exists()
