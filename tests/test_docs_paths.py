"""Every file the docs name exists: a map of the code that names moved files misleads."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: The docs that map the code (writing-a-connector.md names the files of a connector the
#: reader is about to write; benchmarks.md the directories a run makes).
DOCS = [ROOT / "README.md", ROOT / "docs" / "architecture.md", ROOT / "docs" / "deployment.md"]
#: A project path in backquotes: `dataflow/services/flows.py`, `tests/e2e/test_crash.py`.
PATH = re.compile(r"`((?:dataflow|source_support|connectors|tests|bench|tools|examples|docs)/[\w./-]+)`")


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_each_path_a_doc_names_exists(doc):
    missing = sorted(
        {m for m in PATH.findall(doc.read_text()) if "*" not in m and not (ROOT / m.split("::")[0]).exists()}
    )
    assert missing == [], f"{doc.name} names files that do not exist"
