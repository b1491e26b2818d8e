"""Records as users have them: zoned timestamps, nested JSON, too many bad rows (issue 7)."""

from __future__ import annotations

import datetime as dt
import json

import pyarrow.parquet as pq

from dataflow.models import DeadLetter
from tests.helpers import run_flow, spec


def test_nested_json_with_zoned_timestamps_is_inferred_landed_and_queried(worker, dirs):
    with open(dirs.data / "events.jsonl", "w") as f:
        for i in range(300):
            at = "2013-01-01T10:00:00Z" if i % 3 == 0 else "2013-01-01T12:00:00+02:00" if i % 3 else ""
            at = at or "2013-01-01 10:00:00"  # naive counts as UTC
            user = {"name": f"u{i}", "tags": ["t"] * (i % 4)}
            f.write(json.dumps({"id": i, "at": at, "user": user}) + "\n")
    doc = spec("nested", str(dirs.data), str(dirs.out / "sink"))
    doc["format"] = {"type": "jsonl"}  # inferred
    doc["transform"]["sql"] = (
        "SELECT id, user.name AS name, size(user.tags) AS tags, hour(at) AS h, at FROM source"
    )

    run = run_flow(doc)

    assert run.status == "succeeded", run.message
    assert "`user` STRUCT<`name`: STRING, `tags`: ARRAY<STRING>>" in run.schema_ddl
    assert "`at` TIMESTAMP" in run.schema_ddl
    rows = sorted(pq.read_table(dirs.out / "sink").to_pylist(), key=lambda r: r["id"])
    assert [(r["id"], r["name"], r["tags"]) for r in rows] == [(i, f"u{i}", i % 4) for i in range(300)]
    instant = dt.datetime(2013, 1, 1, 10, tzinfo=dt.UTC)
    # every value names the same instant, with a zone or without (UTC)
    assert {r["at"] if r["at"].tzinfo else r["at"].replace(tzinfo=dt.UTC) for r in rows} == {instant}
    assert run.errors_count == 0


def test_a_wrong_schema_with_skip_errors_fails_the_run_past_max_errors(worker, dirs):
    with open(dirs.data / "a.csv", "w") as f:
        f.write("id,sensor,temperature\n" + "".join(f"{i},s,hot\n" for i in range(20_000)))
    doc = spec("many-bad", str(dirs.data), str(dirs.out / "sink"), skip_errors=True, batch_size=500)
    doc["flow"]["max_errors"] = 10

    run = run_flow(doc)

    assert run.status == "failed"
    assert "more than 10 bad records (flow.max_errors)" in run.message
    letters = DeadLetter.objects.filter(run=run)
    assert 10 < letters.count() < 20_000
    assert letters.order_by("position").first().line == 2
