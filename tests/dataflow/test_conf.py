"""dataflow/conf.py: every setting the app reads has a default there, given to a project's
settings that leave it out (and only to those), with paths under the project's BASE_DIR."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pytest
from django.conf import global_settings
from django.core.exceptions import ImproperlyConfigured

from dataflow import conf

ROOT = Path(__file__).resolve().parents[2]
#: The checkout's own settings module defines its settings; every other module only reads.
OWN_SETTINGS = {ROOT / "dataflow" / "settings.py", ROOT / "dataflow" / "conf.py"}


def _settings_read() -> set[str]:
    """Every setting name the app's code reads: ``settings.NAME``, ``getattr(settings,
    "NAME", ...)``, and a ``"DATAFLOW_..."`` string (a setting looked up by its name; not an
    environment variable a module reads itself)."""
    names: set[str] = set()
    for path in (ROOT / "dataflow").rglob("*.py"):
        if path in OWN_SETTINGS or "migrations" in path.parts:
            continue
        text = path.read_text()
        names.update(re.findall(r"(?<![\w.])settings\.([A-Z][A-Z0-9_]+)", text))
        names.update(re.findall(r"getattr\(settings, \"([A-Z][A-Z0-9_]+)\"", text))
        environment = set(re.findall(r"os\.environ\.get\(\"([A-Z0-9_]+)\"", text))
        names.update(set(re.findall(r"\"(DATAFLOW_[A-Z0-9_]+)\"", text)) - environment)
    return names


def test_every_setting_the_app_reads_is_djangos_or_has_a_default():
    defaults = {*conf.defaults(Path("/project")), *conf.CELERY_DEFAULTS}
    without = {name for name in _settings_read() if not hasattr(global_settings, name)} - defaults

    assert without == set(), f"add a default to dataflow/conf.py for {sorted(without)}"


def test_a_project_gets_the_defaults_it_left_out_under_its_base_dir(tmp_path, monkeypatch):
    for name in ("DATAFLOW_VAR_DIR", "DATAFLOW_LANDING_ROOT", "DATAFLOW_BASE_DIR", "DATAFLOW_ALLOWED_ROOTS"):
        monkeypatch.delenv(name, raising=False)
    project = SimpleNamespace(BASE_DIR=tmp_path, DATAFLOW_TICK_SECONDS=7)

    conf.apply_defaults(project)
    got = vars(project)

    assert got["DATAFLOW_TICK_SECONDS"] == 7  # what it set stays
    assert got["DATAFLOW_READER_LEASE_SECONDS"] == 10.0
    assert got["VAR_DIR"] == tmp_path / "var"
    assert got["DATAFLOW_LANDING_ROOT"] == tmp_path / "var" / "landing"
    assert got["DATAFLOW_ALLOWED_ROOTS"] == [tmp_path.resolve() / d for d in ("data", "examples", "out")]
    assert got["CELERY_TASK_DEFAULT_QUEUE"] == "celery"  # Celery's own default
    assert got["DATAFLOW_OWN_CELERY_APP"] is False


def test_defaults_derived_from_a_setting_follow_the_projects_value(tmp_path, monkeypatch):
    monkeypatch.delenv("DATAFLOW_LANDING_ROOT", raising=False)
    monkeypatch.delenv("DATAFLOW_ALLOWED_ROOTS", raising=False)
    monkeypatch.delenv("REDIS_SOCKET_TIMEOUT", raising=False)
    project = SimpleNamespace(
        BASE_DIR=tmp_path, VAR_DIR=tmp_path / "state", DATAFLOW_BASE_DIR=tmp_path / "files"
    )
    project.DATAFLOW_READER_SLICE_SECONDS = 20.0

    conf.apply_defaults(project)
    got = vars(project)

    assert got["DATAFLOW_LANDING_ROOT"] == tmp_path / "state" / "landing"
    assert got["REDISLITE_DB"] == tmp_path / "state" / "redis.db"
    assert got["DATAFLOW_ALLOWED_ROOTS"][0] == (tmp_path / "files" / "data").resolve()
    assert got["REDIS_SOCKET_TIMEOUT"] == 25.0


def test_a_project_without_base_dir_is_told_what_to_set():
    with pytest.raises(
        ImproperlyConfigured, match="BASE_DIR is not set.*set BASE_DIR, or VAR_DIR and DATAFLOW_BASE_DIR"
    ):
        conf.apply_defaults(SimpleNamespace())
