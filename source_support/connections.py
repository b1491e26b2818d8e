"""Named connections as connectors see them: the kinds a connector may declare it accepts,
and one connection resolved for a run (its URL with credentials, and the key or subject
patterns it is limited to).

Plain Python. Who may use which connection is decided on the Django side
(``dataflow.services.connections``); a connector only reads ``Environment.connections``.

A connector declares which of its fields is a network address with ``option(address=KIND)``
and which names keys (or subjects) inside it with ``option(scoped=True)``, and has a field
``connection: str | None = connection_field(KIND)`` (``source_support.config``): the spec
layer then accepts ``connection = "NAME"`` instead of the address, checks the scoped options against the connection's patterns, and resolves
the name when the source or sink is built.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import quote, urlsplit, urlunsplit

#: Characters that make a key pattern a glob (Redis and NATS-like subjects alike).
GLOB_CHARS = "*?[\\"


@dataclass(frozen=True)
class ConnectionKind:
    """A type of connection (``redis``; later ``nats``, ``s3``, ``kafka``, ``postgresql``)."""

    type: str
    description: str
    #: ``validate_url(url, field) -> url``: the URL if it names a server of this kind,
    #: else a ConfigError naming ``field``.
    validate_url: Callable[[str, str], str]
    #: The port of a URL that names none (for the address check).
    default_port: int
    #: URL schemes whose host may be replaced by the address that was checked (the client
    #: then connects to it and to nothing else); a TLS scheme keeps its name for the
    #: certificate and is checked when resolved.
    pinnable_schemes: tuple[str, ...] = ()
    #: URL schemes that name no network host (a unix socket): never for non-staff users.
    local_schemes: tuple[str, ...] = ()


CONNECTION_KINDS: dict[str, ConnectionKind] = {}


def register_connection_kind(kind: ConnectionKind) -> None:
    CONNECTION_KINDS[kind.type] = kind


@dataclass(frozen=True)
class ConnectionTarget:
    """A named connection resolved for one run: the URL to connect to (credentials in it)
    and the key patterns it is limited to (empty: any key)."""

    name: str
    type: str
    url: str
    key_patterns: tuple[str, ...] = ()

    def allows_key(self, key: str) -> bool:
        """Whether ``key`` (a stream key, a subject) lies inside the patterns."""
        return key_allowed(key, self.key_patterns)


def key_allowed(key: str, patterns: tuple[str, ...] | list[str]) -> bool:
    """Whether ``key`` matches one of ``patterns`` (globs); any key when there are none."""
    return not patterns or any(fnmatch.fnmatchcase(key, pattern) for pattern in patterns)


def glob_static_prefix(glob: str) -> str:
    """The part of a glob before its first wildcard (all of it when it has none)."""
    for index, char in enumerate(glob):
        if char in GLOB_CHARS:
            return glob[:index]
    return glob


def glob_within(glob: str, patterns: tuple[str, ...] | list[str]) -> bool:
    """Whether every key ``glob`` can match surely matches one of ``patterns``; decided
    conservatively (a False may be a glob that would in fact stay inside): a literal key
    must match a pattern; a glob must equal a pattern, or start with the literal prefix of
    a pattern of the form ``PREFIX*``."""
    if not patterns:
        return True
    if glob_static_prefix(glob) == glob:
        return key_allowed(glob, patterns)
    for pattern in patterns:
        if glob == pattern:
            return True
        prefix = pattern[:-1]
        if pattern.endswith("*") and glob_static_prefix(prefix) == prefix and glob.startswith(prefix):
            return True
    return False


def prefixes_overlap(pattern: str, reserved_prefix: str) -> bool:
    """Whether ``pattern`` may match a key that starts with ``reserved_prefix``."""
    static = glob_static_prefix(pattern)
    if static == pattern:  # a literal key
        return pattern.startswith(reserved_prefix)
    return static.startswith(reserved_prefix) or reserved_prefix.startswith(static)


def url_with_credentials(url: str, username: str, password: str) -> str:
    """``url`` with ``username``/``password`` as its user part, when it has none."""
    parts = urlsplit(url)
    if not password and not username:
        return url
    if "@" in parts.netloc:
        return url  # the URL's own credentials win
    user_info = quote(username, safe="")
    if password:
        user_info += ":" + quote(password, safe="")
    return urlunsplit(parts._replace(netloc=f"{user_info}@{parts.netloc}"))


def url_with_host(url: str, address: str) -> str:
    """``url`` with its host replaced by ``address`` (an IP), credentials and port kept."""
    parts = urlsplit(url)
    user_info, at, _ = parts.netloc.rpartition("@")
    port = f":{parts.port}" if parts.port is not None else ""
    host = f"[{address}]" if ":" in address else address
    return urlunsplit(parts._replace(netloc=f"{user_info}{at}{host}{port}"))
