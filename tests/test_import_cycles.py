"""The project's modules import one another without a cycle (``tools/import_cycles.py``)."""

from __future__ import annotations

from tools.import_cycles import import_cycles


def test_no_module_imports_itself_through_others():
    assert import_cycles() == []


def test_a_cycle_is_found(tmp_path, monkeypatch):
    """The finder itself: two modules that import each other are one cycle."""
    package = tmp_path / "looped"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from looped import b\n")
    (package / "b.py").write_text("def f():\n    from looped import a  # inside a function: still an edge\n")
    (package / "c.py").write_text("from looped import a\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert import_cycles(["looped"]) == [["looped.a", "looped.b"]]
