"""docs/writing-a-connector.md and its connector agree: each file the page shows is the file
kept here (the page's package ``connectors.lines`` is ``tests.connectors.lines.connector``),
each file kept here is on the page, and the kit's summary is the one the page prints."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PAGE = ROOT / "docs" / "writing-a-connector.md"
HERE = Path(__file__).resolve().parent
#: The page's name for the package, and the repository's.
PAGE_PACKAGE, KEPT_PACKAGE = "connectors.lines", "tests.connectors.lines.connector"
#: A file the page shows: a line "`PATH`:", a blank line, a fenced block.
SHOWN = re.compile(r"^`(?P<path>[\w/.]+\.py)`:\n\n```python\n(?P<code>.*?)^```$", re.MULTILINE | re.DOTALL)


def kept_path(shown: str) -> Path:
    if shown.startswith("connectors/lines/"):
        return HERE / "connector" / shown.removeprefix("connectors/lines/")
    return ROOT / shown


def shown_files() -> dict[Path, str]:
    return {kept_path(m["path"]): m["code"] for m in SHOWN.finditer(PAGE.read_text())}


def test_each_file_the_page_shows_is_the_file_kept_here():
    shown = shown_files()

    assert len(shown) >= 7, "the page's files were not found"
    for path, code in shown.items():
        assert path.read_text() == code.replace(PAGE_PACKAGE, KEPT_PACKAGE), (
            f"{path} is not as the page shows it"
        )
    kept = {p for p in HERE.rglob("*.py") if p.name not in ("test_page.py", "conftest.py", "__init__.py")}
    kept.add(HERE / "connector" / "__init__.py")
    assert kept <= set(shown), (
        f"not on the page: {sorted(str(p.relative_to(ROOT)) for p in kept - set(shown))}"
    )


@pytest.mark.slow  # a pytest of its own: about 10 s on 2 idle cores
def test_the_kits_summary_is_the_one_the_page_prints():
    page = PAGE.read_text()
    command = re.search(
        r"^\$ python -m pytest -q (tests/connectors/lines/test_conformance\.py)\n.*?\n(.*?) in ", page, re.M
    )
    assert command, "the page's run of the kit was not found"

    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", command.group(1)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )

    summary = re.search(r"^(\d+ passed(?:, \d+ skipped)?) in ", done.stdout, re.M)
    assert summary, done.stdout[-2000:]
    assert summary.group(1) == command.group(2)
