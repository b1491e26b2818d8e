"""The management commands: applyflows, flows, startflow, stopflow."""

from __future__ import annotations

import os
import subprocess
import sys
from urllib.parse import urlsplit

import pytest
from django.core.management import CommandError, call_command

from dataflow.models import DataFlow
from tests.db_template import REPO, own_database
from tests.helpers import write_csv

TOML = """
[flow]
name = "{name}"
parallelism = 2
[source]
type = "files"
path = "{data}/*.csv"
[format]
type = "csv"
[transform]
sql = "SELECT * FROM source"
[sink]
type = "parquet"
path = "{out}/sink"
"""


@pytest.mark.django_db
def test_applyflows_creates_then_updates_from_toml(dirs, tmp_path, capsys):
    path = tmp_path / "flow.toml"
    path.write_text(TOML.format(name="from-toml", data=dirs.data, out=dirs.out))

    call_command("applyflows", str(path))
    call_command("applyflows", str(path))

    assert capsys.readouterr().out.splitlines() == ["created flow from-toml", "updated flow from-toml"]
    flow = DataFlow.objects.get(name="from-toml")
    assert (flow.parallelism, flow.format_type, flow.sink_type) == (2, "csv", "parquet")


@pytest.mark.django_db
def test_applyflows_refuses_an_unknown_field_with_file_and_field(dirs, tmp_path):
    path = tmp_path / "flow.toml"
    path.write_text(TOML.format(name="x", data=dirs.data, out=dirs.out) + 'surprise = "yes"\n')

    with pytest.raises(CommandError, match=r"flow.toml: sink.surprise: is not a field of sink"):
        call_command("applyflows", str(path))
    assert not DataFlow.objects.exists()


@pytest.mark.django_db
def test_applyflows_refuses_broken_toml_and_missing_files(tmp_path):
    path = tmp_path / "broken.toml"
    path.write_text("[flow\nname=")

    with pytest.raises(CommandError, match="broken.toml: not valid TOML"):
        call_command("applyflows", str(path))
    with pytest.raises(CommandError, match="nope.toml: No such file"):
        call_command("applyflows", str(tmp_path / "nope.toml"))


@pytest.mark.django_db
def test_flows_lists_status_and_counters(dirs, tmp_path, capsys):
    write_csv(dirs.data / "a.csv", range(5))
    path = tmp_path / "flow.toml"
    path.write_text(TOML.format(name="listed", data=dirs.data, out=dirs.out))
    call_command("applyflows", str(path))
    call_command("startflow", "listed")
    capsys.readouterr()

    call_command("flows")

    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:3] == ["NAME", "STATUS", "RUN"]
    assert lines[1].split()[:2] == ["listed", "running"]
    call_command("stopflow", "listed")
    assert DataFlow.objects.get(name="listed").status == "stopped"


@pytest.mark.django_db
def test_commands_refuse_an_unknown_flow():
    for command in ("runflow", "startflow", "stopflow"):
        with pytest.raises(CommandError, match="no flow named 'ghost'"):
            call_command(command, "ghost")


@pytest.mark.slow
def test_a_command_on_a_database_never_migrated_says_to_migrate_it(tmp_path):
    # A fresh PostgreSQL database of its own, never migrated: each command used to end in a
    # traceback of a missing table.
    url = own_database("unmigrated")
    env = {**os.environ, "DATABASE_URL": url, "DATAFLOW_VAR_DIR": str(tmp_path)}
    for command in (["flows"], ["applyflows", "examples/sensors.toml"], ["runflow", "nothing"]):
        done = subprocess.run(
            [sys.executable, "manage.py", *command], cwd=REPO, env=env, capture_output=True, text=True
        )
        assert done.returncode == 1, done.stderr
        name = urlsplit(url).path.strip("/")
        assert f"CommandError: the database (postgresql {name}) is missing" in done.stderr, done.stderr
        assert "run `python manage.py migrate` first" in done.stderr
        assert "Traceback" not in done.stderr
