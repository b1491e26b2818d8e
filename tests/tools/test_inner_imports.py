"""tools/inner_imports.py: which imports count as inside a function, and when it fails."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tools import inner_imports
from tools.inner_imports import ROOT, main

MODULE = """
from __future__ import annotations

import os
from typing import TYPE_CHECKING
import typing

if TYPE_CHECKING:
    from collections.abc import Iterator


class Reader:
    import json

    def read(self):
        import csv  # noqa: PLC0415 csv is imported only by this method, which runs once
        return csv

    async def wait(self):
        from asyncio import sleep  # noqa: PLC0415

        return sleep


def outer():
    def inner():
        from pathlib import Path

        return Path

    if TYPE_CHECKING:
        from decimal import Decimal
    else:
        import decimal as Decimal
    if typing.TYPE_CHECKING:
        import fractions
    try:
        import zlib  # noqa: E501, PLC0415 - zlib may be missing from a custom build
    except ImportError:
        zlib = None
    s = "# noqa: PLC0415 a string, not a comment"; import gzip
    return inner, Decimal, zlib, s, gzip
"""


@pytest.fixture()
def tree(tmp_path, monkeypatch):
    (tmp_path / "pkg" / "migrations").mkdir(parents=True)
    (tmp_path / "pkg" / "module.py").write_text(MODULE)
    (tmp_path / "pkg" / "migrations" / "0001_initial.py").write_text("def forwards():\n    import os\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path / "pkg"


def line_of(text: str) -> int:
    [line] = [n for n, line in enumerate(MODULE.splitlines(), 1) if line.strip().startswith(text)]
    return line


def test_imports_in_functions_count_and_type_checking_ones_and_migrations_do_not(tree):
    found = [(i.line, i.statement, i.reason) for i in inner_imports.inner_imports(tree / "module.py")]
    files = list(inner_imports.python_files([tree]))

    assert found == [
        (line_of("import csv"), "import csv", "csv is imported only by this method, which runs once"),
        (line_of("from asyncio"), "from asyncio import sleep", None),
        (line_of("from pathlib"), "from pathlib import Path", None),
        (line_of("import decimal"), "import decimal as Decimal", None),
        (line_of("import zlib"), "import zlib", "zlib may be missing from a custom build"),
        (line_of("s = "), "import gzip", None),
    ]
    assert files == [tree / "module.py"]


def test_each_is_printed_with_file_and_line_and_one_without_a_reason_fails(tree, capsys):
    assert main([str(tree)]) == 1

    out = capsys.readouterr().out.splitlines()
    assert out == [
        f"pkg/module.py:{line_of('import csv')}: import csv  "
        "(csv is imported only by this method, which runs once)",
        f"pkg/module.py:{line_of('from asyncio')}: from asyncio import sleep  NO REASON",
        f"pkg/module.py:{line_of('from pathlib')}: from pathlib import Path  NO REASON",
        f"pkg/module.py:{line_of('import decimal')}: import decimal as Decimal  NO REASON",
        f"pkg/module.py:{line_of('import zlib')}: import zlib  (zlib may be missing from a custom build)",
        f"pkg/module.py:{line_of('s = ')}: import gzip  NO REASON",
        "6 imports inside functions (at most 14), 4 without a reason "
        "(`# noqa: PLC0415 <why>` on the import's first line)",
    ]


def test_imports_that_all_say_why_pass_up_to_the_limit(tree, capsys):
    module = tree / "module.py"
    text = module.read_text()
    for line in (
        "from asyncio import sleep",
        "from pathlib import Path",
        "import decimal as Decimal",
        "import gzip",
    ):
        text = text.replace(line, f"{line}  # noqa: PLC0415 a reason")
    module.write_text(text)

    assert main([str(tree)]) == 0
    assert main([str(tree), "--max", "5"]) == 1
    assert "6 imports inside functions (at most 5), 0 without a reason" in capsys.readouterr().out


@pytest.mark.slow
def test_the_packages_have_at_most_twelve_imports_inside_functions_each_saying_why():
    result = subprocess.run(
        [sys.executable, "tools/inner_imports.py"], cwd=ROOT, capture_output=True, text=True, check=False
    )

    assert result.returncode == 0, result.stdout
