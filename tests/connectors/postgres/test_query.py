"""A postgres source's ``query``: one plain SELECT, its tables named with their schema."""

from __future__ import annotations

import pytest

from connectors.postgres.query import checked_query, query_tables
from source_support.errors import ConfigError


def test_the_tables_of_a_select_are_found_with_their_schema_and_ctes_left_out():
    tables = query_tables('WITH x AS (SELECT * FROM s.t) SELECT * FROM x JOIN "Foo".Bar b ON true, orders')
    assert sorted(t.qualified for t in tables) == ["Foo.bar", "public.orders", "s.t"]


def test_a_bare_catalog_name_is_run_as_a_table_of_public_not_the_catalog():
    text, tables = checked_query("SELECT * FROM pg_stat_activity")
    assert [t.qualified for t in tables] == ["public.pg_stat_activity"]
    assert '"public"."pg_stat_activity"' in text


@pytest.mark.parametrize(
    ("query", "reason"),
    [
        ("DELETE FROM orders", "must be a SELECT"),
        ("SELECT 1 FROM a; DROP TABLE a", "must be one SELECT"),
        ("SELECT pg_read_file('/etc/passwd') FROM orders", "pg_read_file() is not allowed"),
        ("SELECT lo_import('/etc/passwd') FROM orders", "lo_import() is not allowed"),
        ("SELECT * FROM dblink('host=x', 'select 1') AS t(a int)", "is not allowed"),
        ("SELECT current_setting('data_directory') FROM orders", "current_setting() is not allowed"),
        ("SELECT * FROM orders FOR UPDATE", "not allowed in a read-only query"),
        ("SELECT * INTO copy_of FROM orders", "not allowed in a read-only query"),
        ("SELECT * FROM generate_series(1, 3)", "only tables may be read"),
        ("COPY orders TO '/tmp/x'", "must be a SELECT"),
        ("SELECT 1", "reads no table"),
        ("SELEC * FROM orders", "not a query"),
    ],
)
def test_anything_but_a_plain_select_is_refused_naming_the_field(query, reason):
    with pytest.raises(ConfigError) as refused:
        query_tables(query)
    assert refused.value.field == "source.query"
    assert reason in refused.value.reason
