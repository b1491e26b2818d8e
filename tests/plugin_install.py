"""Installs the connector package of ``tests/connector_package`` as pip would, into a site
directory of the test's own: the package's files, and a ``.dist-info`` whose
``entry_points.txt`` is made from the package's ``pyproject.toml``. The site directory is put
on ``sys.path``, so ``importlib.metadata`` finds the distribution and its entry points.

The fixture ``connector_package`` gives the installer; everything it changed (``sys.path``,
the imported modules, the registries, the plugins loaded) is put back after the test.
"""

from __future__ import annotations

import shutil
import sys
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from source_support import plugins
from source_support.connections import CONNECTION_KINDS
from source_support.formats.registry import FORMAT_ALIASES, FORMATS
from source_support.registry import FAILED_PLUGINS, SINKS, SOURCES

PACKAGE = Path(__file__).resolve().parent / "connector_package"
MODULE = "tiny_connector"

Install = Callable[..., Path]


def install(site: Path, entry_points: dict[str, str] | None = None) -> Path:
    """Installs the package into ``site`` with its own entry points (or ``entry_points``);
    the dist-info directory."""
    project = tomllib.loads((PACKAGE / "pyproject.toml").read_text())["project"]
    declared = project["entry-points"][plugins.GROUP] if entry_points is None else entry_points
    shutil.copytree(PACKAGE / MODULE, site / MODULE, dirs_exist_ok=True)
    dist_info = site / f"{project['name'].replace('-', '_')}-{project['version']}.dist-info"
    dist_info.mkdir(parents=True, exist_ok=True)
    (dist_info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n"
    )
    lines = "".join(f"{name} = {value}\n" for name, value in declared.items())
    (dist_info / "entry_points.txt").write_text(f"[{plugins.GROUP}]\n{lines}")
    return dist_info


@pytest.fixture()
def connector_package(tmp_path: Path) -> Iterator[Install]:
    """``install(entry_points=None)``: the package installed into a site directory on
    ``sys.path``; nothing of it is left after the test."""
    site = tmp_path / "site-packages"
    site.mkdir()
    registries = (SOURCES, SINKS, FORMATS, FORMAT_ALIASES, CONNECTION_KINDS, FAILED_PLUGINS)
    kept = [dict(registry) for registry in registries]
    done = set(plugins._DONE)
    sys.path.insert(0, str(site))
    try:
        yield lambda entry_points=None: install(site, entry_points)
    finally:
        sys.path.remove(str(site))
        for name in [m for m in sys.modules if m == MODULE or m.startswith(f"{MODULE}.")]:
            del sys.modules[name]
        for registry, before in zip(registries, kept, strict=True):
            registry.clear()
            registry.update(before)
        plugins._DONE.clear()
        plugins._DONE.update(done)
