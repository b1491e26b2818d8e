"""The contract of a connector's declared options: the test base class each source, format
and sink type's ``test_config_options.py`` inherits (it imports pytest and jsonschema).

A table with every declared option is accepted by the validator and by the JSON Schema,
and an undeclared option or a value of the wrong type is refused by both, naming the field.
The test module gives an ``env`` fixture (an ``Environment`` the validator uses)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from source_support.errors import ConfigError
from source_support.formats import validate_format
from source_support.options import Option, options_json_schema
from source_support.registry import Environment, section_options, validate_sink, validate_source


def schema_errors(schema: dict[str, Any], table: Any) -> list[str]:
    """Why ``table`` does not fit ``schema``, each as "path: message" (empty: it fits)."""
    # jsonschema types ``iter_errors`` only in part (an overload takes an untyped schema).
    validator: Any = Draft202012Validator(schema)
    errors: list[Any] = list(validator.iter_errors(table))
    return [f"{'.'.join(map(str, e.absolute_path)) or '(table)'}: {e.message}" for e in errors]


def wrong_value(option: Option) -> Any:
    """A value of a type the option does not take."""
    types = option.type if isinstance(option.type, tuple) else (option.type,)
    return {"not": "this"} if dict not in types else "text"


class OptionsContract:
    """What every source, format and sink type promises of its declared options. A subclass
    sets ``section`` and ``type_name`` and gives ``full_table``."""

    section: str
    type_name: str

    def full_table(self, env: Environment) -> dict[str, Any]:
        """A table (without ``type``) with every declared option, at an example or default value."""
        raise NotImplementedError

    def validate(self, table: dict[str, Any], env: Environment) -> dict[str, Any]:
        """The stored form of a table (without ``type``), or a ConfigError."""
        typed = {"type": self.type_name, **table}
        if self.section == "source":
            return validate_source(typed, env)[1]
        if self.section == "sink":
            return validate_sink(typed, env)[1]
        return validate_format(typed).options

    @property
    def options(self) -> tuple[Option, ...]:
        return section_options(self.section, self.type_name)

    @property
    def schema(self) -> dict[str, Any]:
        return options_json_schema(
            self.options, title=f"{self.type_name} {self.section}", type_name=self.type_name
        )

    def test_the_full_table_sets_every_declared_option(self, env: Environment) -> None:
        assert set(self.full_table(env)) == {option.name for option in self.options}

    def test_the_full_table_is_accepted_by_the_validator_and_the_schema(self, env: Environment) -> None:
        table = self.full_table(env)

        self.validate(copy.deepcopy(table), env)
        assert schema_errors(self.schema, {"type": self.type_name, **table}) == []

    def test_an_undeclared_option_is_refused_by_the_validator_and_the_schema(self, env: Environment) -> None:
        table = {**self.full_table(env), "colour": "red"}

        with pytest.raises(ConfigError) as caught:
            self.validate(table, env)
        assert caught.value.field == f"{self.section}.colour"
        assert schema_errors(self.schema, {"type": self.type_name, **table}) == [
            "(table): Additional properties are not allowed ('colour' was unexpected)"
        ]

    def test_a_value_of_the_wrong_type_is_refused_by_the_validator_and_the_schema(
        self, env: Environment
    ) -> None:
        for option in self.options:
            table = {**self.full_table(env), option.name: wrong_value(option)}

            with pytest.raises(ConfigError) as caught:
                self.validate(table, env)
            assert caught.value.field == f"{self.section}.{option.name}"
            assert caught.value.reason.startswith("must be ")
            errors = schema_errors(self.schema, {"type": self.type_name, **table})
            assert {e.split(":")[0] for e in errors} == {option.name}  # a type and maybe an enum

    def test_a_required_option_left_out_is_refused_by_the_validator_and_the_schema(
        self, env: Environment
    ) -> None:
        for option in self.options:
            if not option.required:
                continue
            table = {k: v for k, v in self.full_table(env).items() if k != option.name}

            with pytest.raises(ConfigError) as caught:
                self.validate(table, env)
            assert caught.value.field == f"{self.section}.{option.name}"
            assert schema_errors(self.schema, {"type": self.type_name, **table}) == [
                f"(table): '{option.name}' is a required property"
            ]

    def test_every_option_has_help_and_its_default_fits_it(self) -> None:
        for option in self.options:
            assert option.help.strip().endswith("."), option.name
            if option.has_default:
                assert schema_errors(self.schema["properties"][option.name], option.default) == [], (
                    option.name
                )
