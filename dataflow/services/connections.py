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
(``reserved.reserved_redis_keys``: its namespace, Celery's queues, kombu's keys), when it
is saved and each time a run resolves it; a run checks each key it reads or writes too.

Secrets (``url``, ``password``) are encrypted at rest (``dataflow.encryption``: the model's
fields seal them) and never returned: shown masked, and a masked value sent back keeps the
stored one. A connection whose secrets no key of ``DATAFLOW_SECRET_KEYS`` decrypts is
refused wherever it is used (``SecretUndecryptable``, naming it and the setting).
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.contrib.auth.models import Group
from django.db import transaction

from dataflow.encryption import secrets_check
from dataflow.models import Connection
from dataflow.redis_client import redis_url
from dataflow.services.addresses import url_address_check
from dataflow.services.models_tables import model_table
from dataflow.services.reserved import reserved_redis_keys, reserved_tables
from source_support import addresses
from source_support.connections import (
    CONNECTION_KINDS,
    ConnectionKind,
    ConnectionTarget,
    glob_static_prefix,
    glob_within,
    globs_intersect,
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
    password: str | None = None,
    key_patterns: Iterable[str] = (),
    description: str = "",
    users: Iterable[Any] | None = None,
    groups: Iterable[Group] | None = None,
    connection: Connection | None = None,
) -> Connection:
    """Creates a connection or, given ``connection``, changes it (its name too). A secret
    sent back exactly as ``connection_masked`` showed it keeps the stored secret, and a
    ``password`` not given (None) keeps the stored one. Grants
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
        if password is None:
            password = connection.password
        stored = {"url": connection.url, "password": connection.password}
        secrets = unmask_config(CONNECTION_SECRETS, {"url": url, "password": password}, stored)
        # A secret kept as stored that no key decrypts: give it again, or fix the keys.
        secrets_check(secrets, what=f"connection {connection.name!r}")
        url, password = secrets["url"], secrets["password"]
    if not isinstance(url, str) or not url.strip():
        raise ConfigError("url", f"is required: where the {type} server is")
    url = kind.validate_url(url.strip(), "url")
    patterns = [kind.key_of(pattern) for pattern in _checked_patterns(key_patterns)]
    _check_deployment_keys(kind, url, patterns, field="key_patterns")
    _check_reserved_tables(kind, patterns, field="key_patterns")
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
    flow away from the deployment's keys (``reserved_redis_keys``)."""
    if kind.type != "redis" or not is_deployment_redis(url):
        return
    if not patterns:
        raise ConfigError(
            field,
            "are required: this is the deployment's own Redis; name the keys its flows may use "
            '(e.g. ["team-a:*"]), away from the deployment\'s own keys',
        )
    reserved = reserved_redis_keys()
    for pattern in patterns:
        clash = reserved_clash(pattern, reserved)
        if clash is not None:
            raise ConfigError(
                field,
                f"{pattern!r} may match the deployment's own keys ({clash}) on its own Redis; "
                "use a prefix of their own",
            )


def _check_reserved_tables(kind: ConnectionKind, patterns: list[str], *, field: str) -> None:
    """Refuses a postgres connection's pattern that can reach only tables the deployment
    uses (``public.auth_*``, ``public.django_session``); a wider one (``public.*``) is
    kept, and the reserved tables stay out of it wherever a flow names a table."""
    if kind.type != "postgres":
        return
    reserved = reserved_tables()
    for pattern in patterns:
        clash = next((glob for glob in reserved if _only_reserved(pattern, glob)), None)
        if clash is not None:
            raise ConfigError(
                field, f"{pattern!r} names tables the deployment itself uses ({clash}): never readable"
            )


def _only_reserved(pattern: str, reserved: str) -> bool:
    """Whether every ``schema.table`` that ``pattern`` matches matches ``reserved`` (decided
    conservatively: a False may be a pattern that reaches only reserved tables too; those
    are still refused wherever a flow names one)."""
    schema, _, table = pattern.partition(".")
    reserved_schema, _, reserved_table = reserved.partition(".")
    if reserved_schema != "*" and schema != reserved_schema:
        return False
    prefix = glob_static_prefix(table)
    if prefix == table:
        return fnmatch.fnmatchcase(table, reserved_table)
    return reserved_table.endswith("*") and fnmatch.fnmatchcase(prefix, reserved_table)


def reserved_clash(glob: str, reserved: tuple[str, ...]) -> str | None:
    """The first reserved glob that ``glob`` (a key or a pattern) can match a key of."""
    return next((name for name in reserved if globs_intersect(glob, name)), None)


def is_deployment_redis(url: str) -> bool:
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
        keys = registry[table["type"]].config.address_keys(table)
        if address is None or keys is None:
            continue
        if isinstance(table.get("model"), str) and address.address == "postgres":
            # A Django model's table (resolved here: connectors know nothing of Django).
            found = model_table(table["model"], f"{section}.model")
            keys = [*keys, ("model", f"{found.schema}.{found.name}")]
        _check_use(section, table, options, address, owner=owner, keys=keys)
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
    keys: list[tuple[str, str]],
) -> None:
    name = table.get("connection")
    restricted = is_restricted(owner)
    if name is None:
        if not restricted:
            _check_reserved_keys(section, table, options, address, keys=keys)
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
    key_of = CONNECTION_KINDS[connection.type].key_of
    for option in options:
        value = table.get(option.name)
        # A scoped option names one key or glob, or a list of them (NATS subject filters).
        for item in value if isinstance(value, list) else [value]:
            if (
                option.scoped
                and isinstance(item, str)
                and not glob_within(key_of(item), connection.key_patterns)
            ):
                raise ConfigError(
                    f"{section}.{option.name}",
                    f"{item!r} may reach keys outside what connection {name!r} allows "
                    f"({', '.join(connection.key_patterns)})",
                )
    for field, key in keys:
        if not glob_within(key_of(key), connection.key_patterns):
            raise ConfigError(
                f"{section}.{field}",
                f"{key!r} may reach keys outside what connection {name!r} allows "
                f"({', '.join(connection.key_patterns)})",
            )
    if restricted:
        _target_for_restricted(connection, field=f"{section}.connection")


def _check_reserved_keys(
    section: str, table: dict[str, Any], options, address: Option, *, keys: list[tuple[str, str]]
) -> None:
    """A staff or operator flow on the deployment's own Redis (its ``url`` left out, or
    naming that server) names no key the deployment uses."""
    url = table.get(address.name)
    if address.address != "redis" or not (url is None or (isinstance(url, str) and is_deployment_redis(url))):
        return
    reserved = reserved_redis_keys()
    named = [(option.name, table.get(option.name)) for option in options if option.scoped]
    for field, glob in [*named, *keys]:
        clash = reserved_clash(glob, reserved) if isinstance(glob, str) else None
        if clash is not None:
            raise ConfigError(
                f"{section}.{field}",
                f"{glob!r} may reach a key the deployment itself uses on its own Redis ({clash}); "
                "use a prefix of your own",
            )


def _usable_connection(name: str, owner, *, field: str, kind: str | None) -> Connection:
    connection = Connection.objects.filter(name=name).first()
    if connection is None or (
        is_restricted(owner) and not connection_granted(connection=connection, user=owner)
    ):
        granted = "granted to the flow's owner " if is_restricted(owner) else ""
        raise ConfigError(field, f"no connection named {name!r} is {granted}(see /api/connections/)")
    if kind is not None and connection.type != kind:
        raise ConfigError(
            field, f"{name!r} is a {connection.type} connection; this needs a {kind} connection"
        )
    secrets_check(
        {"url": connection.url, "password": connection.password}, what=f"connection {name!r}", field=field
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
    servers = []
    for server, written in server_urls(url):
        checked = url_address_check(server, field=field, default_port=kind.default_port)
        if scheme in kind.pinnable_schemes:
            server = url_with_host(server, str(checked[0]))
        servers.append(server if written else server.split("://", 1)[1])
    return ",".join(servers)


def server_urls(url: str) -> list[tuple[str, bool]]:
    """The servers of a comma-separated URL list (``nats://a:4222,nats://b:4222``; Kafka's
    ``kafka://a:9092,b:9092``), each a URL of its own and whether its scheme was written:
    one without takes the first one's, so that each host is checked, and pinned, on its
    own (and is written back without it)."""
    first, *rest = [piece.strip() for piece in url.split(",") if piece.strip()] or [url]
    scheme = urlsplit(first).scheme
    return [(first, True)] + [
        (piece, True) if "://" in piece else (f"{scheme}://{piece}", False) for piece in rest
    ]


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
        registry = SOURCES if section == "source" else SINKS
        if address is None or type_name not in registry:
            continue
        if registry[type_name].config.address_keys(config or {}) is None:
            continue
        field = f"{section}.connection"
        if name is None:
            if is_restricted(owner):
                raise ConfigError(
                    field, f"is required: name a {address.address} connection granted to the owner"
                )
            continue
        targets[name] = connection_target(name=name, owner=owner, field=field, kind=address.address)
    return targets


def connection_target(
    *, name: str, owner, field: str = "connection", kind: str | None = None
) -> ConnectionTarget:
    """The connection ``name`` resolved for a flow of ``owner`` (None: the operator's):
    granted to them, of ``kind`` if given, no deployment key in its patterns, its address
    checked for a non-staff owner; a ConfigError naming ``field`` otherwise."""
    connection = _usable_connection(name, owner, field=field, kind=kind)
    connection_kind = CONNECTION_KINDS[connection.type]
    _check_deployment_keys(connection_kind, connection.url, list(connection.key_patterns), field=field)
    url = _target_for_restricted(connection, field=field) if is_restricted(owner) else connection.url
    return ConnectionTarget(
        name=name,
        type=connection.type,
        url=url_with_credentials(url, connection.username, connection.password),
        key_patterns=tuple(connection.key_patterns),
    )


def connection_granted(*, connection: Connection, user) -> bool:
    """Whether ``connection`` is granted to ``user`` (directly or through a group)."""
    return connection.users.filter(pk=user.pk).exists() or connection.groups.filter(user=user).exists()
