"""``flowctl check FILE``: what a TOML file's source and sink reach, and exit code 1 when one
cannot be reached (said with the field, never the password)."""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command

pytestmark = pytest.mark.django_db


def test_check_of_a_file_says_what_failed_and_exits_1(dirs):
    flow = dirs.root / "orders.toml"
    flow.write_text(
        f"""
[flow]
name = "orders"
[source]
type = "redis_streams"
url = "redis://:s3cret@127.0.0.1:1/0"
streams = "orders:*"
[format]
type = "fields"
schema = "id BIGINT"
[transform]
sql = "SELECT * FROM source"
[sink]
type = "parquet"
path = "{dirs.out / "orders"}"
"""
    )
    out = io.StringIO()

    with pytest.raises(CommandError, match="a connection test failed"):
        call_command("flowctl", "check", str(flow), "--timeout", "3", stdout=out)

    printed = out.getvalue()
    assert "[source] redis_streams: FAILED source.url: cannot connect to redis://***@127.0.0.1:1/0" in printed
    assert "[sink] parquet: OK" in printed and "s3cret" not in printed
