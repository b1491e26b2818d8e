"""Config options declared once: the field checks, the JSON Schemas of the API and the admin,
and the masking of secrets are all derived from a connector's (or format's) ``Option``s, so
they cannot drift apart.

Plain Python. A connector's config class declares its fields with ``source_support.config.option``,
which makes their ``Option``s; a format declares its ``Option``s in a tuple.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Any, Final

from source_support.errors import ConfigError


class _Required:
    """The type of ``REQUIRED``: one instance, shown as its name."""

    _instance: _Required | None = None

    def __new__(cls) -> _Required:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "REQUIRED"

    def __reduce__(self) -> str:
        return "REQUIRED"  # pickles and copies as the same sentinel


#: The default of an option that must be given.
REQUIRED: Final = _Required()

#: What a value secret is shown as, and what replaces the credentials of a URL secret.
MASK = "********"
URL_MASK = "****"
SECRET_KINDS = ("", "value", "url")

_JSON_TYPES: dict[type, str] = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    list: "array",
    dict: "object",
}


@dataclass(frozen=True)
class Option:
    """One field of a ``[source]``, ``[format]`` or ``[sink]`` table.

    ``default`` is ``REQUIRED`` when the field must be given, None when it is optional with
    no default (its absence means something, e.g. "the deployment's Redis"). ``secret`` is
    "value" for a password or token (shown as ``********``, never sent back) or "url" for a
    URL that may hold credentials (shown with them masked).
    """

    name: str
    type: type | tuple[type, ...]
    help: str
    default: Any = REQUIRED
    choices: tuple[str | int | float, ...] = ()
    minimum: int | float | None = None
    maximum: int | float | None = None
    secret: str = ""
    example: Any = None
    #: The type of a list's items (a JSON Schema ``array`` needs ``items``); None: any.
    items: type | None = None
    #: A path on the service's file system (relative ones are relative to DATAFLOW_BASE_DIR):
    #: an export writes it relative to the base directory, so it moves between checkouts.
    filesystem_path: bool = False
    #: The connection kind (``"redis"``) when the option is a network address: a flow may
    #: name a connection of that kind instead (``source_support.connections``).
    address: str = ""
    #: Whether the option names keys (or subjects, a glob too) that a connection's key
    #: patterns must hold.
    scoped: bool = False

    def __post_init__(self) -> None:
        types = self.type if isinstance(self.type, tuple) else (self.type,)
        unknown = [t for t in types if t not in _JSON_TYPES]
        if unknown:
            raise TypeError(
                f"option {self.name}: type {unknown[0]!r} is not one of str, int, bool, float, list, dict"
            )
        if self.secret not in SECRET_KINDS:
            raise ValueError(f"option {self.name}: secret must be one of {SECRET_KINDS}, not {self.secret!r}")

    @property
    def required(self) -> bool:
        return self.default is REQUIRED

    @property
    def has_default(self) -> bool:
        """Whether the option has a value when it is left out."""
        return self.default is not REQUIRED and self.default is not None


def option_types(options: Iterable[Option]) -> dict[str, type | tuple[type, ...]]:
    """The type of each option by name: what ``check_fields`` takes."""
    return {option.name: option.type for option in options}


def option_defaults(options: Iterable[Option]) -> dict[str, Any]:
    """The default of each option that has one."""
    return {option.name: option.default for option in options if option.has_default}


def option_named(options: Iterable[Option], name: str) -> Option:
    """The option called ``name`` (a KeyError if there is none: a typo in the code)."""
    for option in options:
        if option.name == name:
            return option
    raise KeyError(name)


def check_bounds(section: str, options: Iterable[Option], table: dict[str, Any]) -> None:
    """Refuses a value outside its option's ``choices``, ``minimum`` or ``maximum``, naming
    the field. The types must already have been checked (``check_fields``)."""
    for option in options:
        if option.name not in table:
            continue
        value = table[option.name]
        if option.choices and value not in option.choices:
            raise ConfigError(
                f"{section}.{option.name}", f"must be one of {', '.join(map(str, option.choices))}"
            )
        low, high = option.minimum, option.maximum
        if low is not None and high is not None and not low <= value <= high:
            raise ConfigError(f"{section}.{option.name}", f"must be between {low} and {high}")
        if low is not None and value < low:
            raise ConfigError(f"{section}.{option.name}", f"must be at least {low}")
        if high is not None and value > high:
            raise ConfigError(f"{section}.{option.name}", f"must be at most {high}")


def options_json_schema(
    options: Iterable[Option], *, title: str, type_name: str, description: str = ""
) -> dict[str, Any]:
    """A JSON Schema of the table (its ``type`` included), in the subset that is valid both in
    OpenAPI 3.0 and in draft 2020-12: no type lists, no ``const``, ``example`` not
    ``examples``. Secrets are ``writeOnly``; a password or token is also ``format: password``."""
    options = tuple(options)
    properties: dict[str, Any] = {
        "type": {
            "type": "string",
            "enum": [type_name],
            "description": f'The type of this table: always "{type_name}".',
        }
    }
    for option in options:
        properties[option.name] = _property(option)
    schema: dict[str, Any] = {"title": title, "type": "object"}
    if description:
        schema["description"] = description
    schema["properties"] = properties
    schema["required"] = ["type", *(o.name for o in options if o.required)]
    schema["additionalProperties"] = False
    return schema


def _property(option: Option) -> dict[str, Any]:
    prop = _type_schema(option.type)
    if option.items is not None:
        prop["items"] = _type_schema(option.items)
    elif prop.get("type") == "array":
        prop["items"] = {}
    prop["description"] = option.help
    if option.has_default:
        prop["default"] = option.default
    if option.choices:
        prop["enum"] = list(option.choices)
    if option.minimum is not None:
        prop["minimum"] = option.minimum
    if option.maximum is not None:
        prop["maximum"] = option.maximum
    if option.secret:
        prop["writeOnly"] = True
    if option.secret == "value":
        prop["format"] = "password"
    if option.example is not None:
        prop["example"] = option.example
    return prop


def _type_schema(types: type | tuple[type, ...]) -> dict[str, Any]:
    types = types if isinstance(types, tuple) else (types,)
    if set(types) == {int, float}:
        return {"type": "number"}  # JSON's integers are numbers
    if len(types) == 1:
        return {"type": _JSON_TYPES[types[0]]}
    return {"anyOf": [{"type": _JSON_TYPES[t]} for t in types]}


def mask_config(options: Iterable[Option], config: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``config`` that may be shown: a value secret as ``********``, the credentials
    of a URL secret as ``****`` (scheme, host, port and path kept; a URL without
    credentials unchanged). An empty or absent secret stays as it is."""
    masked = dict(config)
    for option in options:
        value = masked.get(option.name)
        if not option.secret or not isinstance(value, str) or not value:
            continue
        masked[option.name] = MASK if option.secret == "value" else mask_url_credentials(value)
    return masked


def paths_relative_to(options: Iterable[Option], config: dict[str, Any], base_dir: Path) -> dict[str, Any]:
    """A copy of ``config`` in which each filesystem path that lies under ``base_dir`` is
    written relative to it (``base_dir`` itself as ``.``); other values as they are."""
    base = PurePath(os.path.normpath(base_dir))
    relative = dict(config)
    for option in options:
        value = relative.get(option.name)
        if not option.filesystem_path or not isinstance(value, str) or not os.path.isabs(value):
            continue
        path = PurePath(os.path.normpath(value))
        if path == base or base in path.parents:
            relative[option.name] = str(path.relative_to(base))
    return relative


def unmask_config(options: Iterable[Option], new: dict[str, Any], stored: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``new`` in which a secret sent back exactly as ``mask_config`` showed the
    stored one is the stored secret again; any other value (a new secret) is kept as sent.

    Only an exact match counts: a URL edited around its masked password (another host) is
    taken as written, so a stored password never follows a URL to a host it was not for."""
    unmasked = dict(new)
    for option in options:
        if not option.secret or option.name not in new or option.name not in stored:
            continue
        if new[option.name] == mask_config((option,), stored)[option.name]:
            unmasked[option.name] = stored[option.name]
    return unmasked


def mask_url_credentials(url: str) -> str:
    """``url`` with its password (or a lone user part, which may be a token) as ``****``,
    and a ``password=`` query value too: ``redis://user:pw@h:1/0`` -> ``redis://user:****@h:1/0``
    (each URL of a comma-separated list),
    ``redis://:pw@h`` -> ``redis://:****@h``. A URL without credentials is returned as it is."""
    if url.count("://") > 1:  # a list of servers (NATS): each masked
        return ",".join(mask_url_credentials(part.strip()) for part in url.split(","))
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    address, query_sep, query = rest.partition("?")
    if "@" in address:
        user_info, host = address.rsplit("@", 1)  # a password may hold an unescaped @
        user, colon, _ = user_info.partition(":")
        address = f"{user}:{URL_MASK}@{host}" if colon else f"{URL_MASK}@{host}"
    if query:
        query = "&".join(_mask_query_pair(pair) for pair in query.split("&"))
    return f"{scheme}{sep}{address}{query_sep}{query}"


def _mask_query_pair(pair: str) -> str:
    name, equals, value = pair.partition("=")
    if equals and value and name.lower() == "password":
        return f"{name}={URL_MASK}"
    return pair
