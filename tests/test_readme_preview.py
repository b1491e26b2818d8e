"""The README's "Preview and check before you run" blocks: ``flowctl preview`` and
``flowctl check`` of the first flow print what the README shows. Run here on the test
database with the example's file (the README's e2e test runs the steps before them in a
clean checkout; these two need only the flow and its file)."""

from __future__ import annotations

import io
import shutil
from pathlib import Path

import pytest
from django.core.management import call_command

from dataflow.services.toml_import import flow_import, flow_spec_from_toml_bytes
from dataflow.spark.session import spark_job
from tests.e2e.readme_blocks import expected_output, normalise, parse_readme

ROOT = Path(__file__).resolve().parents[1]
#: The blocks this test checks (tests/e2e/test_readme.py leaves them to it), by the command
#: each shows.
PREVIEW_STEPS = {
    "preview-and-check-1": "flowctl preview my-orders --limit 3",
    "preview-and-check-2": "flowctl check my-orders",
}

pytestmark = [pytest.mark.django_db, pytest.mark.slow]


@pytest.fixture()
def checkout(tmp_path, settings) -> Path:
    """The first flow's file and flow, in a directory laid out as the checkout."""
    (tmp_path / "data" / "orders").mkdir(parents=True)
    (tmp_path / "out").mkdir()
    shutil.copy(ROOT / "examples" / "first-flow" / "orders.csv", tmp_path / "data" / "orders")
    settings.DATAFLOW_BASE_DIR = tmp_path
    settings.DATAFLOW_ALLOWED_ROOTS = [tmp_path / "data", tmp_path / "out"]
    spec = flow_spec_from_toml_bytes((ROOT / "examples" / "first-flow" / "orders.toml").read_bytes())
    flow_import(spec=spec)
    with spark_job() as spark:  # warm: the preview's own job is then as quick as the README's
        spark.range(1).collect()
    return tmp_path


def _printed(command: str, checkout: Path) -> list[str]:
    out = io.StringIO()
    call_command(*command.split(), stdout=out)
    return normalise(out.getvalue().splitlines(), str(checkout))[0]


@pytest.mark.parametrize("name", PREVIEW_STEPS)
def test_the_readme_shows_what_preview_and_check_print(checkout, name):
    step = parse_readme((ROOT / "README.md").read_text()).steps[name]
    expected, _ = expected_output(step)

    printed = _printed(PREVIEW_STEPS[name], checkout)

    assert step.commands == [f"python manage.py {PREVIEW_STEPS[name]}"]
    assert printed == expected, "\n".join(printed)
