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

from source_support.errors import ConfigError

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
    #: A key, a key pattern or a scoped option's value as the patterns compare it
    #: (PostgreSQL: ``orders`` is ``public.orders``); the identity for most kinds.
    key_of: Callable[[str], str] = str
    #: What a test of a connection finds through it now (the server answers; the keys its
    #: patterns match, with their sizes), in the connector's words, or a ConfigError saying
    #: what failed; None: a connection of this kind is tested through a flow's source.
    check: Callable[[ConnectionTarget], list[str]] | None = None


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
    #: Globs over keys no flow may touch there (the deployment's own, on its own Redis).
    reserved_keys: tuple[str, ...] = ()

    def allows_key(self, key: str) -> bool:
        """Whether ``key`` (a stream key, a subject) lies inside the patterns, and is not
        reserved."""
        return key_allowed(key, self.key_patterns) and not key_reserved(key, self.reserved_keys)

    def key_refusal(self, key: str, field_name: str) -> ConfigError | None:
        """Why ``key`` may not be read or written through this connection (None: it may)."""
        if self.allows_key(key):
            return None
        return ConfigError(field_name, outside_words(key, self.key_patterns, self.reserved_keys, self.name))


def outside_words(
    key: str,
    patterns: tuple[str, ...] | list[str],
    reserved: tuple[str, ...] | list[str] = (),
    name: str = "",
) -> str:
    """Why ``key`` may not be read or written: a key the deployment uses, or one outside
    the connection's patterns."""
    if key_reserved(key, reserved):
        return f"{key!r} is a key the deployment itself uses on this server: never read or written"
    where = f"connection {name!r}" if name else "its connection"
    return f"{key!r} is outside the keys {where} allows now ({', '.join(patterns)})"


def key_reserved(key: str, reserved: tuple[str, ...] | list[str]) -> bool:
    """Whether ``key`` matches one of the ``reserved`` globs."""
    return any(fnmatch.fnmatchcase(key, glob) for glob in reserved)


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
    return globs_intersect(pattern, glob_literal(reserved_prefix) + "*")


def glob_literal(text: str) -> str:
    """``text`` as a glob that matches only itself."""
    return "".join(f"[{char}]" if char in GLOB_CHARS else char for char in text)


#: One position of a glob: "*" (any run), or the characters one key character may be
#: (None: any character).
_Atom = str | frozenset[str] | None


def _glob_atoms(glob: str) -> list[_Atom]:
    """``glob`` (``*``, ``?``, ``[...]``, ``\\x``) as atoms; a set that negates (``[!..]``,
    ``[^..]``) or holds a range over 256 characters is taken as any character, which only
    ever makes ``globs_intersect`` say yes more often."""
    atoms: list[_Atom] = []
    index = 0
    while index < len(glob):
        char = glob[index]
        index += 1
        if char == "*":
            if not atoms or atoms[-1] != "*":
                atoms.append("*")
        elif char == "?":
            atoms.append(None)
        elif char == "\\" and index < len(glob):
            atoms.append(frozenset(glob[index]))
            index += 1
        elif char == "[" and (end := _set_end(glob, index)) > 0:
            atoms.append(_char_set(glob[index:end]))
            index = end + 1
        else:
            atoms.append(frozenset(char))
    return atoms


def _set_end(glob: str, index: int) -> int:
    """Where the set opened just before ``index`` closes (-1: it does not, "[" is literal);
    a "]" first in the set, or after its negation, is one of its characters."""
    start = index + (1 if glob[index : index + 1] in ("!", "^") else 0)
    start += 1 if glob[start : start + 1] == "]" else 0
    return glob.find("]", start)


def _char_set(body: str) -> frozenset[str] | None:
    if not body or body[0] in "!^":
        return None
    chars: set[str] = set()
    index = 0
    while index < len(body):
        if index + 2 < len(body) and body[index + 1] == "-":
            low, high = ord(body[index]), ord(body[index + 2])
            if high - low > 256:
                return None
            chars.update(chr(code) for code in range(low, high + 1))
            index += 3
        else:
            chars.add(body[index])
            index += 1
    return frozenset(chars)


def globs_intersect(first: str, second: str) -> bool:
    """Whether some key matches both globs (decided exactly for ``*``, ``?``, literal
    characters and sets; a negated set counts as any character, so a yes may be one too
    many, never a no one too few). Walks the product of the two globs' automata."""
    a, b = _glob_atoms(first), _glob_atoms(second)
    seen: set[tuple[int, int]] = set()
    todo = [(0, 0)]
    while todo:
        i, j = todo.pop()
        if (i, j) in seen:
            continue
        seen.add((i, j))
        if i == len(a) and j == len(b):
            return True
        x = a[i] if i < len(a) else ""
        y = b[j] if j < len(b) else ""
        if x == "*":
            todo.append((i + 1, j))  # the star matches nothing more
            if j < len(b) and y != "*":
                todo.append((i, j + 1))  # the star takes the character b's atom matches
        if y == "*":
            todo.append((i, j + 1))
            if i < len(a) and x != "*":
                todo.append((i + 1, j))
        if x not in ("*", "") and y not in ("*", "") and _sets_meet(x, y):
            todo.append((i + 1, j + 1))
    return False


def _sets_meet(x: _Atom, y: _Atom) -> bool:
    if x is None or y is None:
        return True
    assert not isinstance(x, str) and not isinstance(y, str)
    return not x.isdisjoint(y)


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
