"""format.on_schema_change for Avro container files end to end: a directory of files
written by fastavro whose later writer schemas add, lack or retype a field, run through the
real flow (readers, landing, Spark, the Parquet sink); the sink compared with what fastavro
reads from the files, the policy applied by hand; the changes listed on the run."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from dataflow.models import SchemaChangeRecord
from tests.connectors.files.test_avro_drift import by_hand, drifting_files
from tests.helpers import run_flow, spec


def _doc(name: str, dirs, policy: str) -> dict:
    doc = spec(name, str(dirs.data / "*.avro"), str(dirs.out / "sink"), parallelism=1)
    doc["format"] = {"type": "avro", "on_schema_change": policy}  # the columns are a.avro's
    return doc


@pytest.mark.slow
def test_rescue_lands_what_did_not_fit_and_lists_each_change_on_the_run(worker, dirs):
    files = drifting_files(dirs.data)

    run = run_flow(_doc("avro-drift-rescue", dirs, "rescue"))

    assert run.status == "succeeded", run.message
    landed = sorted(pq.read_table(dirs.out / "sink").to_pylist(), key=lambda r: r["id"])
    assert landed == sorted(by_hand("rescue", list(files.values())), key=lambda r: r["id"])
    changes = {
        (c.column_name, c.kind, c.old_type, c.new_type, c.records, c.first_position.split(" block")[0])
        for c in SchemaChangeRecord.objects.filter(run=run)
    }
    assert changes == {
        ("region", "added", "", "STRING", 5, str(files["b"])),
        ("temperature", "missing", "DOUBLE", "", 3, str(files["c"])),
        ("temperature", "retyped", "DOUBLE", "STRING", 2, str(files["d"])),
    }


@pytest.mark.slow
def test_fail_fails_the_run_naming_the_new_field_and_the_files_block(worker, dirs):
    files = drifting_files(dirs.data)

    run = run_flow(_doc("avro-drift-fail", dirs, "fail"))

    assert run.status == "failed"
    assert f"{files['b']} block at byte " in run.message, run.message
    assert "a new column 'region' (STRING)" in run.message
