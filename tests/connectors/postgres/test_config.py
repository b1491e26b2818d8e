"""The ``[source]`` table of a postgres source: what it declares, and what it refuses."""

from __future__ import annotations

import pytest

from connectors.postgres.config import PostgresSourceConfig
from source_support.environment import ModelTable
from source_support.errors import ConfigError
from source_support.registry import Environment
from source_support.testing.options_contract import OptionsContract

RESERVED = ("*.auth_*", "*.django_*")


def _models(label: str, field: str) -> ModelTable:
    tables = {"shop.Order": ModelTable("public", "shop_order", "postgres://app@db:5432/shop")}
    if label not in tables:
        raise ConfigError(field, f"{label!r} is not an installed model")
    return tables[label]


@pytest.fixture()
def env(tmp_path) -> Environment:
    return Environment(
        allowed_roots=(tmp_path,),
        base_dir=tmp_path,
        reserved_tables=RESERVED,
        database_url="postgres://app@127.0.0.1:5432/own",
        model_table=_models,
    )


class TestPostgresSourceOptions(OptionsContract):
    section, type_name = "source", "postgres"

    def full_table(self, env):
        return {
            "url": "postgres://app@127.0.0.1:5432/shop",
            "table": "public.orders",
            "mode": "incremental",
            "key": "id",
            "chunk_rows": 1000,
            "cursor": "updated_at",
        }

    def test_the_full_table_sets_every_declared_option(self, env):
        """connection, query and model stand instead of url and table: one of each is given."""
        alternatives = {"connection", "query", "model", "slot", "publication", "schema_change"}
        assert set(self.full_table(env)) | alternatives == {option.name for option in self.options}


def refusal(table: dict, env: Environment) -> ConfigError:
    with pytest.raises(ConfigError) as refused:
        PostgresSourceConfig.parse(table, env)
    return refused.value


def test_a_cdc_table_keeps_its_slot_publication_and_policy(env):
    table = {
        "table": "orders",
        "mode": "cdc",
        "slot": "adf_orders",
        "publication": "pub",
        "schema_change": "ignore",
    }
    config = PostgresSourceConfig.parse(table, env)

    assert (config.mode, config.slot, config.publication, config.schema_change) == (
        "cdc",
        "adf_orders",
        "pub",
        "ignore",
    )


@pytest.mark.parametrize(
    ("table", "field"),
    [
        ({}, "source.table"),
        ({"table": "orders", "query": "SELECT * FROM orders"}, "source.table"),
        ({"table": "orders", "model": "shop.Order"}, "source.table"),
        ({"table": "auth_user"}, "source.table"),
        ({"query": "SELECT * FROM django_session"}, "source.query"),
        ({"model": "shop.Missing"}, "source.model"),
        ({"table": "orders", "mode": "incremental"}, "source.cursor"),
        ({"table": "orders", "cursor": "updated_at"}, "source.cursor"),
        ({"query": "SELECT * FROM orders", "key": "id"}, "source.key"),
        ({"table": "orders", "url": "mysql://x@h/db"}, "source.url"),
        ({"table": "orders", "url": "postgres://x@h/db", "connection": "c"}, "source.connection"),
        ({"table": "orders", "chunk_rows": 0}, "source.chunk_rows"),
        ({"query": "SELECT * FROM orders", "mode": "cdc"}, "source.mode"),
        ({"table": "orders", "slot": "adf_orders"}, "source.slot"),
        ({"table": "orders", "schema_change": "ignore"}, "source.schema_change"),
        ({"table": "orders", "mode": "cdc", "slot": "Bad-Name"}, "source.slot"),
        ({"table": "orders", "mode": "cdc", "publication": "x" * 64}, "source.publication"),
        ({"table": "orders", "mode": "cdc", "schema_change": "rescue"}, "source.schema_change"),
        ({"table": "auth_user", "mode": "cdc"}, "source.table"),
    ],
)
def test_what_cannot_be_read_is_refused_naming_the_field(env, table, field):
    assert refusal(table, env).field == field


def test_a_model_names_its_table_and_the_stored_config_keeps_what_was_written(env):
    config = PostgresSourceConfig.parse({"model": "shop.Order"}, env)

    assert config.to_dict() == {"model": "shop.Order", "mode": "snapshot", "chunk_rows": 100_000}
