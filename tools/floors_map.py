"""The "Floors" section of docs/architecture.md, made from the code so that it cannot go stale.

The floors are import-linter's layers contract in pyproject.toml (``lint-imports`` holds them:
each floor imports only from the floors below it); what each file holds is the first sentence
of its docstring. ``--check`` (the default) exits 1 when the doc's section differs from what the
code says; ``--write`` puts the section in the doc (before the first ``## `` heading the first
time, in place after that).

    python tools/floors_map.py [--check | --write] [--pyproject P] [--doc D]
"""

from __future__ import annotations

import argparse
import ast
import difflib
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = ROOT / "pyproject.toml"
DOC = ROOT / "docs" / "architecture.md"
WRITE_COMMAND = "python tools/floors_map.py --write"
START = "<!-- floors map: made by `{command}` from pyproject.toml's layers contract; do not edit -->"
END = "<!-- end of floors map -->"


class MapError(Exception):
    """The map cannot be made: no layers contract, or a module missing or undocumented."""


def layers_contract(pyproject: Path) -> dict:
    config = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    contracts = config.get("tool", {}).get("importlinter", {}).get("contracts", [])
    layered = [c for c in contracts if c.get("type") == "layers"]
    if not layered:
        raise MapError(f"{pyproject} has no import-linter contract of type 'layers'")
    return layered[0]


def layer_modules(layer: str) -> list[str]:
    """The modules of one layer: ``a | b`` (independent) and ``a : b`` alike; an optional
    layer's parentheses dropped."""
    return [name.strip().strip("()").strip() for name in re.split(r"[|:]", layer) if name.strip()]


def module_path(root: Path, module: str) -> Path:
    """``dataflow.runs`` -> ``dataflow/runs/__init__.py`` or ``dataflow/runs.py``."""
    base = root.joinpath(*module.split("."))
    for path in (base / "__init__.py", base.with_suffix(".py")):
        if path.is_file():
            return path
    raise MapError(f"the layers contract names {module}, which has no {base}.py or {base}/__init__.py")


def summary(path: Path, root: Path) -> str:
    docstring = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)))
    if not docstring:
        raise MapError(f"{path.relative_to(root)} has no docstring to say what it holds")
    paragraph = " ".join(docstring.split("\n\n")[0].split())
    sentence = re.split(r"(?<=\.)\s+(?=[A-Z`])", paragraph, maxsplit=1)[0]
    return sentence.replace("``", "`")


def row(root: Path, module: str) -> tuple[str, str]:
    """The file (a package with its files) and what it holds."""
    path = module_path(root, module)
    if path.name != "__init__.py":
        return f"`{path.relative_to(root).as_posix()}`", summary(path, root)
    package = path.parent
    files = sorted(
        p.stem if p.is_file() else f"{p.name}/"
        for p in package.iterdir()
        if (p.suffix == ".py" and p.name != "__init__.py") or (p / "__init__.py").is_file()
    )
    holds = f" ({', '.join(f'`{f}`' for f in files)})" if files else ""
    return f"`{package.relative_to(root).as_posix()}/`{holds}", summary(path, root)


def escape(cell: str) -> str:
    return cell.replace("|", "\\|")


def render(pyproject: Path = PYPROJECT, root: Path | None = None) -> str:
    """The section: a heading, a sentence, and one row per module, the top floor first."""
    root = root or pyproject.parent
    contract = layers_contract(pyproject)
    containers = contract.get("containers") or [""]
    layers = contract["layers"]
    lines = [
        START.format(command=WRITE_COMMAND),
        "## Floors: which file holds what",
        "",
        "Each floor imports only from the floors below it: import-linter's layers contract in",
        "`pyproject.toml`, checked by `lint-imports` in `.ci/run`. The top floor comes first; what a",
        "file holds is the first sentence of its docstring.",
        "",
        "| floor | file | what it holds |",
        "|---|---|---|",
    ]
    for container in containers:
        for number, layer in zip(range(len(layers), 0, -1), layers, strict=True):
            for i, name in enumerate(layer_modules(layer)):
                module = f"{container}.{name}" if container else name
                file, holds = row(root, module)
                floor = str(number) if i == 0 else ""
                lines.append(f"| {floor} | {file} | {escape(holds)} |")
    lines.append(END)
    return "\n".join(lines) + "\n"


def with_section(doc: str, section: str) -> str:
    """``doc`` with ``section`` in place of its old one, or before its first ``## `` heading."""
    start = doc.find(START.format(command=WRITE_COMMAND))
    if start >= 0:
        end = doc.index(END, start) + len(END) + 1
        return doc[:start] + section + doc[end:]
    first = re.search(r"^## ", doc, flags=re.MULTILINE)
    at = first.start() if first else len(doc)
    return doc[:at] + section + "\n" + doc[at:]


def check(pyproject: Path = PYPROJECT, doc: Path = DOC) -> str:
    """How the doc differs from what the code says (a diff), or "" when it does not."""
    text = doc.read_text(encoding="utf-8")
    wanted = with_section(text, render(pyproject))
    if wanted == text:
        return ""
    diff = difflib.unified_diff(
        text.splitlines(), wanted.splitlines(), str(doc), f"{doc} as made from the code", lineterm=""
    )
    return "\n".join(diff) + f"\n\nThe floors map in {doc.name} is stale: run `{WRITE_COMMAND}`."


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--check", action="store_true", help="exit 1 if the doc is stale (the default)")
    action.add_argument("--write", action="store_true", help="write the section into the doc")
    parser.add_argument("--pyproject", type=Path, default=PYPROJECT)
    parser.add_argument("--doc", type=Path, default=DOC)
    args = parser.parse_args(argv)
    try:
        if args.write:
            args.doc.write_text(with_section(args.doc.read_text(encoding="utf-8"), render(args.pyproject)))
            return 0
        stale = check(args.pyproject, args.doc)
    except MapError as error:
        print(f"floors map: {error}", file=sys.stderr)
        return 2
    print(stale or f"{args.doc}: the floors map is up to date")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
