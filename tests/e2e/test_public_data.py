"""Public datasets through whole flows (real worker, PostgreSQL, Redis and Spark), compared
with pandas: penguins grouped by sex with NA as NULL, NA in a DOUBLE column as a dead letter
or a failed split, and vega's cars.json (a JSON array) with a declared DATE."""

from __future__ import annotations

import datetime as dt
import shutil
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq

from dataflow.models import DataFlow, DeadLetter
from tests.connectors.files.public_data import PENGUINS, VEGA
from tests.factories import DataFlowFactory
from tests.helpers import run_to_end

PENGUINS_CSV = {
    "type": "csv",
    "schema": "species STRING, island STRING, bill_length_mm DOUBLE, bill_depth_mm DOUBLE, "
    "flipper_length_mm DOUBLE, body_mass_g DOUBLE, sex STRING, year BIGINT",
}


def _flow_over(dirs, dataset: Path, name: str, fmt: dict, **flow_fields) -> DataFlow:
    """A flow over a copy of the public ``dataset`` file, into out/<name>."""
    shutil.copy(dataset, dirs.data / dataset.name)
    return DataFlowFactory(
        name=name, source_path=str(dirs.data / dataset.name), format=fmt, parallelism=2, **flow_fields
    )


def test_penguins_grouped_by_sex_have_a_null_group_as_pandas_has(worker, dirs):
    flow = _flow_over(
        dirs,
        PENGUINS,
        "by-sex",
        {**PENGUINS_CSV, "null_values": ["", "NA"]},
        sql="SELECT sex, count(*) AS n, round(avg(body_mass_g), 3) AS mass FROM source GROUP BY sex",
    )

    run = run_to_end(flow)

    assert run.status == "succeeded", run.message
    assert run.records_read == 344 and run.errors_count == 0
    ours = {r["sex"]: (r["n"], r["mass"]) for r in pq.read_table(dirs.out / "by-sex").to_pylist()}
    frame = pd.read_csv(PENGUINS, keep_default_na=False, na_values=["", "NA"])
    theirs = frame.groupby("sex", dropna=False).agg(n=("year", "size"), mass=("body_mass_g", "mean"))
    expected = {
        (None if pd.isna(sex) else sex): (int(row.n), None if pd.isna(row.mass) else round(row.mass, 3))
        for sex, row in theirs.iterrows()
    }
    assert ours == expected
    assert ours[None][0] == 11 and "NA" not in ours


def test_penguins_na_in_a_double_column_is_a_dead_letter_not_a_null(worker, dirs):
    flow = _flow_over(dirs, PENGUINS, "strict-skip", PENGUINS_CSV, skip_errors=True)

    run = run_to_end(flow)

    assert run.status == "succeeded", run.message
    assert run.errors_count == 2 and run.records_read == 342
    letters = DeadLetter.objects.filter(run=run).order_by("position")
    text = PENGUINS.read_bytes()
    assert [d.position for d in letters] == [
        text.index(b"Adelie,Torgersen,NA,NA"),
        text.index(b"Gentoo,Biscoe,NA,NA"),
    ]
    assert all("column 3 'bill_length_mm': invalid value 'NA' for DOUBLE" in d.error for d in letters)


def test_penguins_na_in_a_double_column_fails_the_split_naming_line_and_column(worker, dirs):
    flow = _flow_over(dirs, PENGUINS, "strict", PENGUINS_CSV)

    run = run_to_end(flow)

    assert run.status == "failed"
    assert "penguins.csv line 5 (byte " in run.message
    assert "column 3 'bill_length_mm': invalid value 'NA' for DOUBLE" in run.message


def test_cars_json_array_with_a_declared_date_is_read_as_pandas_reads_it(worker, dirs):
    flow = _flow_over(
        dirs,
        VEGA / "cars.json",
        "cars",
        {
            "type": "json",
            "schema": "Name STRING, Miles_per_Gallon DOUBLE, Horsepower BIGINT, Year DATE, Origin STRING",
        },
        sql="SELECT year(Year) AS y, count(*) AS n, count(Miles_per_Gallon) AS with_mpg FROM source GROUP BY y",
    )

    run = run_to_end(flow)

    assert run.status == "succeeded", run.message
    assert run.records_read == 406 and run.errors_count == 0
    ours = {r["y"]: (r["n"], r["with_mpg"]) for r in pq.read_table(dirs.out / "cars").to_pylist()}
    frame = pd.read_json(VEGA / "cars.json")
    frame["y"] = pd.to_datetime(frame["Year"]).dt.year
    theirs = frame.groupby("y").agg(n=("Name", "size"), with_mpg=("Miles_per_Gallon", "count"))
    assert ours == {int(y): (int(row.n), int(row.with_mpg)) for y, row in theirs.iterrows()}
    assert min(ours) == dt.date(1970, 1, 1).year
