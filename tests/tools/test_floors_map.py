"""tools/floors_map.py: the "Floors" section of docs/architecture.md, made from the layers
contract and the modules' docstrings, and a check that fails when the doc is stale."""

from __future__ import annotations

import pytest

from tools import floors_map
from tools.floors_map import MapError, main

CONTRACT = """
[tool.importlinter]
root_packages = ["app"]

[[tool.importlinter.contracts]]
name = "app's floors"
type = "layers"
containers = ["app"]
layers = ["api | (admin)", "runs", "context : models"]
"""

MODULES = {
    "app/__init__.py": '"""The app."""\n',
    "app/api.py": '"""The REST API: views over the services.\n\nMore that the map leaves out."""\n',
    "app/admin.py": '"""The admin, for ``staff`` (e.g. the site\'s owners). Not the API."""\n',
    "app/runs/__init__.py": '"""The engine: one module per job."""\n',
    "app/runs/tick.py": '"""The tick."""\n',
    "app/runs/finish.py": '"""The end of a run."""\n',
    "app/runs/streams/__init__.py": '"""Streams."""\n',
    "app/context.py": '"""What every service needs | and no more."""\n',
    "app/models.py": '"""What a flow is."""\n',
}

DOC = """# How it works

An introduction.

## The data path

Records go from a source to a sink.
"""

SECTION = """\
<!-- floors map: made by `python tools/floors_map.py --write` from pyproject.toml's layers contract; do not edit -->
## Floors: which file holds what

Each floor imports only from the floors below it: import-linter's layers contract in
`pyproject.toml`, checked by `lint-imports` in `.ci/run`. The top floor comes first; what a
file holds is the first sentence of its docstring.

| floor | file | what it holds |
|---|---|---|
| 3 | `app/api.py` | The REST API: views over the services. |
|  | `app/admin.py` | The admin, for `staff` (e.g. the site's owners). |
| 2 | `app/runs/` (`finish`, `streams/`, `tick`) | The engine: one module per job. |
| 1 | `app/context.py` | What every service needs \\| and no more. |
|  | `app/models.py` | What a flow is. |
<!-- end of floors map -->
"""


@pytest.fixture()
def project(tmp_path):
    (tmp_path / "pyproject.toml").write_text(CONTRACT)
    for name, text in MODULES.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "architecture.md").write_text(DOC)
    return tmp_path


def args(project, *flags):
    return [
        *flags,
        "--pyproject",
        str(project / "pyproject.toml"),
        "--doc",
        str(project / "docs/architecture.md"),
    ]


def test_each_floor_lists_its_modules_top_first_with_their_docstrings_first_sentence(project):
    assert floors_map.render(project / "pyproject.toml") == SECTION


def test_the_section_goes_before_the_first_heading_then_is_replaced_in_place(project):
    doc = project / "docs" / "architecture.md"

    assert main(args(project, "--write")) == 0
    assert doc.read_text() == DOC.replace("## The data path", SECTION + "\n## The data path")

    (project / "app" / "models.py").write_text('"""What a flow is, and its runs."""\n')
    assert main(args(project, "--write")) == 0
    assert doc.read_text() == DOC.replace(
        "## The data path",
        SECTION.replace("What a flow is.", "What a flow is, and its runs.") + "\n## The data path",
    )


def test_the_check_fails_on_a_stale_doc_saying_how_to_make_it_again(project, capsys):
    assert main(args(project, "--write")) == 0
    assert main(args(project, "--check")) == 0
    assert floors_map.check(project / "pyproject.toml", project / "docs/architecture.md") == ""

    (project / "app" / "runs" / "slices.py").write_text('"""Reader slices."""\n')
    assert main(args(project)) == 1

    out = capsys.readouterr().out
    assert "-| 2 | `app/runs/` (`finish`, `streams/`, `tick`) |" in out
    assert "+| 2 | `app/runs/` (`finish`, `slices`, `streams/`, `tick`) |" in out
    assert "The floors map in architecture.md is stale: run `python tools/floors_map.py --write`." in out


@pytest.mark.parametrize(
    ("change", "error"),
    [
        (lambda p: (p / "app" / "context.py").write_text("X = 1\n"), "app/context.py has no docstring"),
        (lambda p: (p / "app" / "models.py").unlink(), "the layers contract names app.models, which has no"),
        (
            lambda p: (p / "pyproject.toml").write_text("[tool.importlinter]\n"),
            "has no import-linter contract of type 'layers'",
        ),
    ],
)
def test_a_module_missing_or_undocumented_or_no_contract_is_an_error_not_a_map(
    project, capsys, change, error
):
    change(project)

    with pytest.raises(MapError, match=error):
        floors_map.render(project / "pyproject.toml")
    assert main(args(project)) == 2
    assert error in capsys.readouterr().err


def test_the_architecture_doc_shows_the_floors_as_the_code_has_them():
    stale = floors_map.check()

    assert not stale, stale


def test_every_module_of_dataflow_stands_on_a_floor():
    """A new module must be given a floor: import-linter checks only the modules it names."""
    named = [
        module
        for layer in floors_map.layers_contract(floors_map.PYPROJECT)["layers"]
        for module in floors_map.layer_modules(layer)
    ]
    root = floors_map.PYPROJECT.parent
    unplaced = []
    for path in sorted((root / "dataflow").rglob("*.py")):
        module = ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")
        if ".migrations" in module:
            continue
        if path.name == "__init__.py" and any(name.startswith(module + ".") for name in named):
            continue  # a package that only groups floors (dataflow, dataflow.services)
        if not any(module == name or module.startswith(name + ".") for name in named):
            unplaced.append(module)
    assert unplaced == []
