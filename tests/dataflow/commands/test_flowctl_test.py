"""``flowctl test FILE...``: a flow's ``[[test]]`` tables run through its real format parser
and its transform on a real local Spark session; every example flow's tests pass, so the
examples can never rot. The typed comparison and the refusals need no Spark."""

from __future__ import annotations

import datetime as dt
import io
from decimal import Decimal
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from dataflow.services.flow_tests import rows_diff
from dataflow.services.flows import flow_apply
from source_support.errors import ConfigError
from tests.e2e.fleet import ROOT
from tests.helpers import spec

FLOW = """
[flow]
name = "totals"

[source]
type = "files"
path = "data/*.csv"

[format]
type = "csv"
schema = "id BIGINT, customer STRING, amount DECIMAL(10,2), at TIMESTAMP"

[transform]
sql = "SELECT customer, count(*) AS orders, sum(amount) AS total, max(at) AS last FROM source GROUP BY customer"

[sink]
type = "csv"
path = "out/totals"
"""
INPUT = "id,customer,amount,at\n1,acme,1.50,2026-03-01 10:00:00\n2,acme,2.25,2026-03-02 11:00:00\n3,initech,4.00,\n"


def example_flows() -> list[Path]:
    """Every flow file under examples/ that has tests (its own [[test]] or a .test.toml)."""
    flows = []
    for path in sorted((ROOT / "examples").rglob("*.toml")):
        if path.name.endswith(".test.toml"):
            continue
        if path.with_name(path.stem + ".test.toml").is_file() or "[[test]]" in path.read_text():
            flows.append(path)
    return flows


def _flowctl(*args: str) -> str:
    out = io.StringIO()
    call_command("flowctl", *args, stdout=out)
    return out.getvalue()


def test_an_example_flow_has_tests():
    assert ROOT / "examples/first-flow/orders.toml" in example_flows()


@pytest.mark.slow
@pytest.mark.parametrize("flow", example_flows(), ids=lambda p: str(p.relative_to(ROOT)))
def test_example_flow_tests_pass(db, flow):
    out = _flowctl("test", str(flow))
    assert out.rstrip().endswith(" passed, 0 failed"), out


@pytest.mark.slow
def test_a_failing_test_prints_the_diff_and_exits_1(db, tmp_path):
    (tmp_path / "totals.toml").write_text(FLOW)
    (tmp_path / "in.csv").write_text(INPUT)
    (tmp_path / "totals.test.toml").write_text(
        """
[[test]]
name = "green"
input = "in.csv"
rows = [
  { customer = "acme", orders = 2, total = "3.75", last = 2026-03-02T11:00:00 },
  { customer = "initech", orders = 1, total = 4 },
]

[[test]]
name = "red"
input = "in.csv"
rows = [
  { customer = "acme", orders = "2", total = 3.75, last = 2026-03-02T11:00:00 },
  { customer = "hooli", orders = 1, total = 1 },
]
"""
    )
    out = io.StringIO()
    with pytest.raises(CommandError, match="1 of 2 flow tests failed"):
        call_command("flowctl", "test", str(tmp_path / "totals.toml"), stdout=out)
    assert out.getvalue().splitlines() == [
        f"PASS  {tmp_path}/totals.test.toml: green",
        f"FAIL  {tmp_path}/totals.test.toml: red",
        "      2 rows, 2 expected",
        "      missing (expected, not in the output): 2",
        '        - {customer = "acme", orders = "2", total = 3.75, last = 2026-03-02 11:00:00}',
        '        - {customer = "hooli", orders = 1, total = 1, last = null}',
        "      unexpected (in the output): 2",
        '        + {customer = "acme", orders = 2, total = 3.75, last = 2026-03-02 11:00:00}',
        '        + {customer = "initech", orders = 1, total = 4.00, last = null}',
        "1 passed, 1 failed",
    ]


@pytest.mark.parametrize(
    ("actual", "expected", "agree"),
    [
        ([{"n": 1}], [{"n": "1"}], False),
        ([{"n": 1}], [{"n": 1.0}], True),
        ([{"n": Decimal("1.50")}], [{"n": 1.5}], True),
        ([{"n": Decimal("1.50")}], [{"n": 1.51}], False),
        ([{"n": True}], [{"n": 1}], False),
        ([{"n": None}], [{"n": ""}], False),
        ([{"n": None}], [{}], True),
        (
            [{"t": dt.datetime(2026, 3, 1, 10, tzinfo=dt.UTC)}],
            [{"t": dt.datetime(2026, 3, 1, 10)}],
            True,
        ),
        ([{"t": dt.datetime(2026, 3, 1, 10)}], [{"t": dt.date(2026, 3, 1)}], False),
        ([{"n": 1}, {"n": 2}], [{"n": 2}, {"n": 1}], True),
        ([{"n": 1}, {"n": 1}], [{"n": 1}], False),
    ],
)
def test_rows_compare_by_type_and_value(actual, expected, agree):
    columns = sorted({k for row in actual for k in row})
    assert (rows_diff(actual=actual, expected=expected, columns=columns, ordered=False) == "") is agree


def test_ordered_rows_must_come_in_order():
    report = rows_diff(
        actual=[{"n": 1}, {"n": 2}], expected=[{"n": 2}, {"n": 1}], columns=["n"], ordered=True
    )
    assert "the same rows in another order" in report


@pytest.mark.parametrize(
    ("tests", "field"),
    [
        ([{"name": "x", "inputs": "a.csv", "rows": []}], "test[0].inputs"),
        ([{"name": "x", "rows": []}], "test[0].input"),
        ([{"name": "x", "input": "a.csv", "records": [], "rows": []}], "test[0].input"),
        ([{"name": "x", "input": "a.csv"}], "test[0].expect"),
        ([{"name": "x", "input": "a.csv", "rows": [1]}], "test[0].rows"),
        ([{"name": "x", "input": "a.csv", "rows": [], "ordered": "yes"}], "test[0].ordered"),
        ([{"input": "a.csv", "rows": []}], "test[0].name"),
    ],
)
def test_bad_test_tables_are_refused_naming_the_field(db, dirs, tests, field):
    doc = {**spec("tested", str(dirs.data / "*.csv"), str(dirs.out / "sink")), "test": tests}
    with pytest.raises(ConfigError) as refused:
        flow_apply(spec=doc)
    assert refused.value.field == field


def test_a_test_file_without_its_flow_is_refused(db, tmp_path):
    (tmp_path / "lonely.test.toml").write_text('[[test]]\nname = "x"\ninput = "a.csv"\nrows = []\n')
    with pytest.raises(CommandError, match="its flow lonely.toml is not beside it"):
        _flowctl("test", str(tmp_path / "lonely.test.toml"))
