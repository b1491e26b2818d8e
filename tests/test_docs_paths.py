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


#: Where the project points a reader to a section: the docs, the compose file's and the
#: Dockerfile's comments, the examples.
POINTING = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    ROOT / "Dockerfile",
    ROOT / "docker-compose.yml",
    *sorted((ROOT / "examples").rglob("*.toml")),
    *sorted((ROOT / "examples").rglob("*.py")),
]
_DOC = r"(?P<doc>README(?:\.md)?|(?:docs/)?[\w-]+\.md)"
#: A section named in words: README's "Workers", (docs/deployment.md, "Redis"),
#: "Your first flow" in the README.
NAMED_SECTION = [
    re.compile(_DOC + r"(?:'s|,) \"(?P<heading>[^\"]+)\""),
    re.compile(r"\"(?P<heading>[^\"]+)\" in (?:the )?" + _DOC),
]
#: A Markdown link to a section: [..](deployment.md#workers), [..](#a-kafka-flow).
LINKED_SECTION = re.compile(r"\]\((?P<doc>[\w./-]*\.md|)#(?P<anchor>[\w-]+)\)")
HEADING = re.compile(r"^#{1,6} (.+)$", re.MULTILINE)


def _headings(doc: Path) -> set[str]:
    """A doc's headings as written (without backquotes) and as GitHub's anchors."""
    text = re.sub(r"```.*?```", "", doc.read_text(), flags=re.DOTALL)  # a "# comment" in a block
    titles = {h.replace("`", "").strip() for h in HEADING.findall(text)}
    anchors = {re.sub(r"[^\w\- ]", "", t.lower()).replace(" ", "-") for t in titles}
    return titles | anchors


def _doc_named(name: str, where: Path) -> Path:
    if name in ("README", "README.md"):
        return ROOT / "README.md"
    for candidate in (where.parent / name, ROOT / name, ROOT / "docs" / name):
        if candidate.is_file():
            return candidate
    return ROOT / name


def section_pointers(path: Path) -> list[tuple[Path, str]]:
    """Every (doc, heading or anchor) that ``path`` points a reader to."""
    lines = path.read_text().splitlines()
    if path.suffix != ".md":  # a comment's pointer may go on in the next line's comment
        lines = [re.sub(r"^\s*#", "", line) for line in lines]
    text = " ".join(" ".join(lines).split())
    found = [(_doc_named(m["doc"], path), m["heading"]) for p in NAMED_SECTION for m in p.finditer(text)]
    if path.suffix == ".md":
        found += [
            (_doc_named(m["doc"], path) if m["doc"] else path, m["anchor"])
            for m in LINKED_SECTION.finditer(text)
        ]
    return found


@pytest.mark.parametrize("path", POINTING, ids=lambda p: str(p.relative_to(ROOT)))
def test_each_section_a_doc_or_comment_points_to_exists(path):
    missing = sorted(
        f"{doc.relative_to(ROOT) if doc.is_relative_to(ROOT) else doc}: {section!r}"
        for doc, section in section_pointers(path)
        if not doc.is_file() or section not in _headings(doc)
    )
    assert missing == [], f"{path.name} points to sections that do not exist"


def test_the_pointer_check_finds_pointers_in_each_form(tmp_path):
    comment = tmp_path / "compose.yml"
    comment.write_text(
        '# the README\'s "Quickstart"; (README, "No such\n# section"); "Commands" in the README\n'
    )
    doc = tmp_path / "page.md"
    doc.write_text(
        "# Page\n\nSee [this](#page), [that](#gone) and [the quickstart](../README.md#quickstart).\n"
    )

    assert section_pointers(comment) == [
        (ROOT / "README.md", "Quickstart"),
        (ROOT / "README.md", "No such section"),
        (ROOT / "README.md", "Commands"),
    ]
    assert [s for _, s in section_pointers(doc)] == ["page", "gone", "quickstart"]
    assert "gone" not in _headings(doc) and "page" in _headings(doc)
