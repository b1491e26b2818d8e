"""What the postgres source and sink share: URLs, table names and the table refusals."""

from __future__ import annotations

import pytest

from connectors.postgres.connection import (
    TableName,
    parse_table_name,
    qualified_key,
    table_refusal,
    validate_url,
)
from source_support.errors import ConfigError

RESERVED = ("*.auth_*", "*.django_*", "pg_catalog.*")


@pytest.mark.parametrize(
    "url",
    ["postgres://app@127.0.0.1:5432/shop", "postgresql://app:pw@db.example.com/shop?sslmode=require"],
)
def test_postgres_urls_of_both_schemes_are_taken(url):
    assert validate_url(url, "url") == url


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("mysql://app:secret@h/shop", "must start with"),
        ("postgres://app:secret@/shop", "names no host"),
        ("postgres://app:secret@h:5432", "names no database"),
        ("postgres://app:secret@h:99999/shop", "port"),
    ],
)
def test_bad_urls_are_refused_with_the_password_masked(url, reason):
    with pytest.raises(ConfigError) as refused:
        validate_url(url, "url")
    assert refused.value.field == "url" and reason in refused.value.reason
    assert "secret" not in str(refused.value)


@pytest.mark.parametrize(
    ("text", "schema", "name"),
    [
        ("orders", "public", "orders"),
        ("Shop.Orders", "shop", "orders"),
        ('"Shop"."Big Orders"', "Shop", "Big Orders"),
        ('analytics."a""b"', "analytics", 'a"b'),
    ],
)
def test_table_names_fold_like_postgresql(text, schema, name):
    assert parse_table_name(text, "source.table") == TableName(schema, name)


@pytest.mark.parametrize("text", ["a.b.c", "a..b", "orders;drop", "a.", '"open', "x" * 64])
def test_what_is_not_a_table_name_is_refused(text):
    with pytest.raises(ConfigError) as refused:
        parse_table_name(text, "source.table")
    assert refused.value.field == "source.table"


def test_a_bare_name_or_pattern_is_in_public_as_the_patterns_see_it():
    assert qualified_key("orders") == "public.orders"
    assert qualified_key("Analytics.*") == "analytics.*"


@pytest.mark.parametrize("table", ["public.auth_user", "shop.django_session", "pg_catalog.pg_authid"])
def test_the_deployments_tables_are_refused_whatever_the_patterns(table):
    name = parse_table_name(table, "t")
    assert "the deployment itself uses" in (table_refusal(name, ("*.*",), RESERVED) or "")


def test_a_table_outside_the_patterns_is_refused_and_one_inside_is_not():
    assert table_refusal(TableName("public", "orders"), ("orders", "analytics.*"), RESERVED) is None
    assert table_refusal(TableName("analytics", "x"), ("orders", "analytics.*"), RESERVED) is None
    refusal = table_refusal(TableName("public", "customers"), ("orders", "analytics.*"), RESERVED)
    assert refusal is not None and "outside the tables" in refusal
