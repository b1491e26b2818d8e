"""``flow_preview``: real records through the real connector, the transform by Spark over
them, and no trace upstream (a Redis stream's consumer groups and the run's keys stay as
they were)."""

from __future__ import annotations

import pandas as pd
import pytest

from dataflow.models import FlowRun, Split
from dataflow.services.errors import TooManyAtOnce
from dataflow.services.preview import flow_preview
from dataflow.services.probes import probe_slot
from source_support.errors import ConfigError
from tests.factories import UserFactory

pytestmark = [pytest.mark.django_db, pytest.mark.slow]

SCHEMA = "id INT, sensor STRING, temperature DOUBLE"
CSV = "id,sensor,temperature\n1,s1,0.5\n2,s2,x\n3,s1,1.5\n4,s3,2.0\nfive,s2,2.5\n6,s1,3.0\n"


def csv_spec(dirs, sql: str, **format_options) -> dict:
    return {
        "flow": {"name": "readings"},
        "source": {"type": "files", "path": str(dirs.data / "*.csv")},
        "format": {"type": "csv", **format_options},
        "transform": {"sql": sql},
        "sink": {"type": "parquet", "path": str(dirs.out / "readings")},
    }


def test_a_csv_preview_is_what_pandas_reads_and_its_transform_is_what_pandas_computes(dirs):
    path = dirs.data / "readings.csv"
    path.write_text(CSV)
    sql = "SELECT sensor, SUM(temperature) AS total FROM source GROUP BY sensor"

    preview = flow_preview(spec=csv_spec(dirs, sql, schema=SCHEMA), owner=None)

    expected = pd.read_csv(path, dtype=str)
    good = expected[expected["id"].str.isdigit() & ~expected["temperature"].str.contains("x")]
    assert preview["records"] == [
        {"id": int(r.id), "sensor": r.sensor, "temperature": float(r.temperature)} for r in good.itertuples()
    ]
    assert [(b["line"], b["raw"].strip()) for b in preview["bad_records"]] == [
        (3, "2,s2,x"),
        (6, "five,s2,2.5"),
    ]
    assert all(b["reason"] and b["position"] for b in preview["bad_records"])
    totals = good.astype({"temperature": float}).groupby("sensor")["temperature"].sum().to_dict()
    assert {row["sensor"]: row["total"] for row in preview["output"]["rows"]} == totals
    assert preview["output"]["schema"] == [
        {"name": "sensor", "type": "STRING"},
        {"name": "total", "type": "DOUBLE"},
    ]
    assert preview["schema_origin"] == "declared"
    assert preview["query"]["kind"] == "whole_input"
    assert not (dirs.out / "readings").exists()  # no sink written
    assert not FlowRun.objects.exists() and not Split.objects.exists()


def test_a_preview_reads_at_most_its_limit_and_infers_the_schema(dirs):
    (dirs.data / "many.csv").write_text("n,word\n" + "".join(f"{i},w{i}\n" for i in range(500)))

    preview = flow_preview(spec=csv_spec(dirs, "SELECT n * 2 AS twice FROM source"), owner=None, limit=7)

    assert [r["n"] for r in preview["records"]] == list(range(7))
    assert [r["twice"] for r in preview["output"]["rows"]] == [2 * i for i in range(7)]
    assert preview["schema_origin"] == "inferred"
    assert preview["source"]["truncated"] == "the limit of 7 records"


def test_a_parquet_preview_reads_whole_row_groups_up_to_its_limit_with_the_footers_schema(dirs):
    frame = pd.DataFrame({"n": range(500), "word": [f"w{i}" for i in range(500)]})
    frame.to_parquet(dirs.data / "many.parquet", index=False, row_group_size=100)
    spec = csv_spec(dirs, "SELECT n * 2 AS twice FROM source") | {"format": {"type": "parquet"}}
    spec["source"]["path"] = str(dirs.data / "*.parquet")

    preview = flow_preview(spec=spec, owner=None, limit=7)

    assert preview["records"] == pd.read_parquet(dirs.data / "many.parquet").head(7).to_dict("records")
    assert [r["twice"] for r in preview["output"]["rows"]] == [2 * i for i in range(7)]
    assert preview["schema"] == [{"name": "n", "type": "BIGINT"}, {"name": "word", "type": "STRING"}]
    assert preview["schema_origin"] == "inferred"


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"limit": 0}, "limit"),
        ({"limit": 10**9}, "limit"),
        ({"timeout_s": 3600}, "timeout_s"),
        ({"start": "x"}, "from"),
    ],
)
def test_a_preview_beyond_its_bounds_is_refused_naming_the_option(dirs, options, field):
    (dirs.data / "a.csv").write_text("n\n1\n")

    with pytest.raises(ConfigError) as refused:
        flow_preview(spec=csv_spec(dirs, "SELECT * FROM source"), owner=None, **options)

    assert refused.value.field == field


def test_a_transform_the_policy_refuses_is_refused_before_anything_is_read(dirs):
    (dirs.data / "a.csv").write_text("n\n1\n")

    with pytest.raises(ConfigError) as refused:
        flow_preview(spec=csv_spec(dirs, "SELECT * FROM parquet.`/etc`"), owner=None)

    assert refused.value.field == "transform.sql"


def test_a_second_preview_of_the_same_user_at_once_is_refused(dirs):
    (dirs.data / "a.csv").write_text("n\n1\n")
    user = UserFactory(is_staff=True)

    with probe_slot(user=user, timeout_s=5), pytest.raises(TooManyAtOnce):
        flow_preview(spec=csv_spec(dirs, "SELECT * FROM source"), owner=user, user=user)

    assert flow_preview(spec=csv_spec(dirs, "SELECT * FROM source"), owner=user, user=user)["records"]


def stream_spec(prefix: str, sql: str = "SELECT id, amount FROM source") -> dict:
    return {
        "flow": {"name": "orders"},
        "source": {"type": "redis_streams", "streams": f"{prefix}in:*"},
        "format": {"type": "fields", "schema": "id BIGINT, amount DOUBLE"},
        "transform": {"sql": sql},
        "sink": {"type": "redis_stream", "key": f"{prefix}out"},
    }


def _positions(rds, prefix: str) -> dict:
    """Every consumer group of the streams under ``prefix`` and the run keys in Redis."""
    groups = {key: rds.xinfo_groups(key) for key in sorted(rds.scan_iter(match=f"{prefix}*", _type="stream"))}
    run_keys = sorted(rds.scan_iter(match="adf:run:*"))
    return {"groups": groups, "run_keys": run_keys}


def test_a_preview_of_a_redis_stream_moves_no_position(rds, prefix):
    for i in range(5):
        rds.xadd(f"{prefix}in:a", {"id": i, "amount": i * 1.5})
    rds.xadd(f"{prefix}in:a", {"id": "bad", "amount": 1})
    rds.xgroup_create(f"{prefix}in:a", "orders", id="0")  # a run's group, read up to nothing
    before = _positions(rds, prefix)

    first = flow_preview(spec=stream_spec(prefix), owner=None, limit=3)
    latest = flow_preview(spec=stream_spec(prefix), owner=None, limit=3, start="latest")

    assert [r["id"] for r in first["records"]] == [0, 1, 2]
    assert [r["id"] for r in latest["records"]] == [3, 4]
    assert [b["raw"] for b in latest["bad_records"]] and "bad" in latest["bad_records"][0]["raw"]
    assert latest["bad_records"][0]["position"].count("-") == 1  # an entry id
    assert [r["amount"] for r in first["output"]["rows"]] == [0.0, 1.5, 3.0]
    assert first["query"] == {
        "kind": "stateless",
        "time_column": "",
        "window_ms": 0,
        "reason": "",
        "needs_stop_rule": False,
    }
    assert _positions(rds, prefix) == before
    assert before["groups"][f"{prefix}in:a".encode()][0]["pending"] == 0


def test_a_stream_query_that_needs_the_whole_input_says_it_needs_a_stop_rule(rds, prefix):
    rds.xadd(f"{prefix}in:a", {"id": 1, "amount": 2.0})

    with pytest.raises(ConfigError) as refused:  # as a flow without [stop] is refused
        flow_preview(spec=stream_spec(prefix, "SELECT SUM(amount) AS s FROM source"), owner=None)
    assert refused.value.field == "transform.sql"

    spec = stream_spec(prefix, "SELECT SUM(amount) AS s FROM source")
    spec["stop"] = {"after_records": 10}
    preview = flow_preview(spec=spec, owner=None)
    assert preview["query"]["kind"] == "whole_input" and preview["query"]["needs_stop_rule"]
    assert preview["output"]["rows"] == [{"s": 2.0}]
