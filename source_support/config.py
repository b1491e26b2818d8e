"""A connector's config declared once: a class of typed fields, each made with ``option``.

    class SequenceSourceConfig(ConfigBase):
        count: int = option("How many numbers to generate.", minimum=1, example=1_000_000)
        splits: int = option("How many range splits.", default=1, minimum=1, maximum=MAX_SPLITS)

        def validate(self, env: Environment) -> Self:  # only what the options cannot say
            if self.splits > self.count:
                raise ConfigError("source.splits", f"must be between 1 and {self.count}")
            return self

The class becomes a frozen, keyword-only dataclass, typed as written. From the one
declaration follow the ``Option``s (``OPTIONS``: the JSON Schema, the admin form, masking),
the parsing of a table (``parse``: unknown fields, types, required fields, choices, bounds
and finite numbers refused, each error naming ``section.field``; then the connector's own
``validate``), the defaults, and what is stored (``to_dict``).

What is stored, for every connector: each field, a default too, except a field that is
None (an optional field left out, such as a ``url`` whose absence means "the deployment's
Redis"). So a later change of a default changes no stored flow, and a stored dict never
holds a null. ``from_dict`` reads what any version stored: a field left out (older
versions of the files source stored only the fields not at their defaults) takes its
default.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Self, dataclass_transform

from source_support.errors import ConfigError
from source_support.options import REQUIRED, Option, check_bounds

if TYPE_CHECKING:
    from source_support.environment import Environment

#: The metadata key of a field made by ``option``: the keyword arguments of its Option.
_OPTION_KEY = "source_support.option"
#: Python types an annotation may use, and the JSON type an option then takes.
_SCALARS: dict[Any, type | tuple[type, ...]] = {
    str: str,
    int: int,
    bool: bool,
    float: (int, float),  # TOML's 1 is an integer; a float field takes it, as Python's typing does
    list: list,
    dict: dict,
}


def option(
    help: str,
    *,
    default: Any = REQUIRED,
    choices: tuple[str | int | float, ...] = (),
    minimum: int | float | None = None,
    maximum: int | float | None = None,
    secret: str = "",
    example: Any = None,
    filesystem_path: bool = False,
    address: str = "",
    scoped: bool = False,
) -> Any:
    """A field of a ``ConfigBase``: its ``Option`` but for the name and type, which are the
    field's own. Left without ``default``, the field is required; ``default=None`` makes it
    optional with no default (its annotation then includes None)."""
    spec = {
        "help": help,
        "default": default,
        "choices": choices,
        "minimum": minimum,
        "maximum": maximum,
        "secret": secret,
        "example": example,
        "filesystem_path": filesystem_path,
        "address": address,
        "scoped": scoped,
    }
    metadata = {_OPTION_KEY: spec}
    if default is REQUIRED:
        return dataclasses.field(metadata=metadata)
    if type(default) in (list, dict):  # a fresh copy for each config: a default is never shared
        return dataclasses.field(default_factory=lambda: default.copy(), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def connection_field(kind: str) -> Any:
    """The ``connection`` field of a config whose address field has ``address=kind``
    (``source_support.connections``)."""
    return option(
        f"The name of a {kind} connection (made by staff, granted to you) to use instead of a url; "
        "required for users who are not staff.",
        default=None,
        example=f"orders-{kind}",
    )


@dataclass_transform(frozen_default=True, kw_only_default=True, field_specifiers=(option,))
class ConfigBase:
    """The base of a source's or sink's config class: see the module's docstring.

    A subclass names its table with ``section="sink"`` in its class line (left out: its
    base class's, ``"source"`` at first) and overrides ``validate`` for what the options
    cannot say (a check across fields, a value resolved, such as a path made absolute)."""

    #: The table the config is read from: "source" or "sink".
    SECTION: ClassVar[str] = "source"
    #: The declared options, in field order.
    OPTIONS: ClassVar[tuple[Option, ...]] = ()

    def __init_subclass__(cls, *, section: str = "", **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        dataclasses.dataclass(frozen=True, kw_only=True)(cls)
        # Set once per class, here: constants to everything else.
        cls.SECTION = section or cls.SECTION  # pyright: ignore[reportConstantRedefinition]
        cls.OPTIONS = _options_of(cls)  # pyright: ignore[reportConstantRedefinition]

    @classmethod
    def parse(cls, table: Mapping[str, Any], env: Environment) -> Self:
        """The config of a table (without ``type``), or a ConfigError naming the field."""
        return cls(**parse_table(cls.SECTION, cls.OPTIONS, table)).validate(env)

    @classmethod
    def address_keys(cls, table: Mapping[str, Any]) -> list[tuple[str, str]] | None:
        """What a table (as written, before validation) reaches through its address option
        (``option(address=KIND)``): None when it reaches nothing (a file sink at a local
        path), so it needs no connection; else, beyond its ``scoped`` options, the key globs
        the connection's key patterns must cover, each with the field a refusal names
        (``[("prefix", "lake/2026/*")]``). Here: [] (always an address, no more keys)."""
        return []

    def validate(self, env: Environment) -> Self:
        """The config after the checks its options cannot declare (a check across fields, a
        value resolved in ``env``), or a ConfigError naming the field. Here: itself."""
        return self

    def to_dict(self) -> dict[str, Any]:
        """What is stored: every field, defaults too, except those that are None."""
        stored: dict[str, Any] = {}
        for declared in self.OPTIONS:
            value = getattr(self, declared.name)
            if value is not None:
                stored[declared.name] = value.copy() if isinstance(value, list | dict) else value
        return stored

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        """The config of a stored (already validated) dict, of this version or an older one:
        a field left out takes its default."""
        return cls(**data)


def parse_table(section: str, options: tuple[Option, ...], table: Mapping[str, Any]) -> dict[str, Any]:
    """The values a table gives (a config class fills in the rest); a ConfigError naming
    ``section.field`` for an unknown field, a value of the wrong type (a nan or inf too), a
    required field left out (or an empty text), or a value outside its choices or bounds."""
    check_fields(section, table, {o.name: o.type for o in options})
    for declared in options:
        value = table.get(declared.name)
        if declared.required and (value is None or (isinstance(value, str) and not value.strip())):
            such_as = f" (such as {declared.example})" if declared.example is not None else ""
            raise ConfigError(f"{section}.{declared.name}", f"is required{such_as}")
        if declared.items is not None and isinstance(value, list):
            _check_items(f"{section}.{declared.name}", declared.items, typing.cast(list[Any], value))
    check_bounds(section, options, dict(table))
    return dict(table)


def _check_items(field: str, item_type: type, values: list[Any]) -> None:
    for index, value in enumerate(values):
        if (isinstance(value, bool) and item_type is not bool) or not isinstance(value, item_type):
            words = _ITEM_WORDS.get(item_type, f"{item_type.__name__} values")
            raise ConfigError(field, f"must be a list of {words} (item {index} is {value!r})")


def check_fields(
    section: str, config: Mapping[str, Any], spec: Mapping[str, type | tuple[type, ...]]
) -> None:
    """Refuses unknown fields and wrong types (a nan or an infinite number too), naming the field."""
    for name, value in config.items():
        if name not in spec:
            raise ConfigError(f"{section}.{name}", f"is not a field of {section} ({', '.join(spec)})")
        expected = spec[name]
        allowed = expected if isinstance(expected, tuple) else (expected,)
        if (isinstance(value, bool) and bool not in allowed) or not isinstance(value, allowed):
            raise ConfigError(f"{section}.{name}", f"must be {expected_types(expected)}")
        if isinstance(value, float) and not math.isfinite(value):  # TOML has nan and inf
            raise ConfigError(f"{section}.{name}", f"must be a finite number, not {value}")


def expected_types(expected: type | tuple[type, ...]) -> str:
    """``must be ...`` in words: "an integer", "a number", "true or false"."""
    allowed = expected if isinstance(expected, tuple) else (expected,)
    if set(allowed) == {int, float}:
        return "a number"
    return " or ".join(_TYPE_WORDS.get(t, f"a {t.__name__}") for t in allowed)


_ITEM_WORDS = {str: "strings", int: "integers", float: "numbers", bool: "booleans"}
_TYPE_WORDS = {
    str: "a string",
    int: "an integer",
    float: "a number",
    bool: "true or false",
    list: "a list",
    dict: "a table",
}


def _options_of(cls: type) -> tuple[Option, ...]:
    """The Option of each field of a config class, its type taken from the annotation."""
    hints = typing.get_type_hints(cls)
    declared: list[Option] = []
    for field in dataclasses.fields(cls):
        spec = field.metadata.get(_OPTION_KEY)
        if spec is None:
            raise TypeError(f"{cls.__name__}.{field.name}: a config field is made with option(...)")
        json_type, items, optional = _json_type(hints[field.name], f"{cls.__name__}.{field.name}")
        if optional != (spec["default"] is None):
            raise TypeError(
                f"{cls.__name__}.{field.name}: an optional field (… | None) has default=None, and only it"
            )
        declared.append(Option(field.name, json_type, items=items, **spec))
    return tuple(declared)


def _json_type(hint: Any, where: str) -> tuple[type | tuple[type, ...], type | None, bool]:
    """(the option's type, its items' type, whether None is allowed) of an annotation."""
    args: tuple[Any, ...] = (hint,)
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        args = typing.get_args(hint)
    optional = type(None) in args
    items: type | None = None
    found: list[type] = []
    for arg in args:
        if arg is type(None):
            continue
        origin = typing.get_origin(arg) or arg
        if origin not in _SCALARS:
            raise TypeError(f"{where}: {arg!r} is not str, int, float, bool, list or dict")
        if origin is list and typing.get_args(arg) and typing.get_args(arg)[0] in _SCALARS:
            items = typing.get_args(arg)[0]
        mapped = _SCALARS[origin]
        found += mapped if isinstance(mapped, tuple) else (mapped,)
    unique = tuple(dict.fromkeys(found))
    return (unique[0] if len(unique) == 1 else unique), items, optional
