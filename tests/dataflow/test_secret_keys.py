"""The keys of the secrets at rest as a deployment's processes get them: DATAFLOW_SECRET_KEYS,
or a key made once per var directory (mode 0600) like Django's secret key; and a process
whose var directory is fresh (its key file lost) refuses the secrets it cannot decrypt,
saying which setting to fix, and shows none of them. Each case starts fresh processes."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography.fernet import Fernet
from django.db import connection as db

from dataflow.models import DataFlow, RunStatus
from tests.factories import DataFlowFactory

ROOT = Path(__file__).resolve().parents[2]
SHOW_KEYS = "from django.conf import settings; print(','.join(settings.DATAFLOW_SECRET_KEYS))"
FLOW_URL_PASSWORD = "flow-url-pw-3e9a61"


def _manage(var_dir: Path, *args: str, **changes: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "DATAFLOW_"))}
    env.update(DATAFLOW_VAR_DIR=str(var_dir), **changes)
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )


def _keys_seen(var_dir: Path, **changes: str) -> list[str]:
    shown = _manage(var_dir, "shell", "-c", SHOW_KEYS, **changes)
    assert shown.returncode == 0, shown.stderr
    return shown.stdout.strip().splitlines()[-1].split(",")


@pytest.mark.slow  # three processes: over 5 s on 2 cores
def test_a_fresh_var_directory_gets_a_key_of_its_own_kept_private_unless_keys_are_set(tmp_path):
    first = _keys_seen(tmp_path / "a")
    again = _keys_seen(tmp_path / "a")
    given = [Fernet.generate_key().decode(), Fernet.generate_key().decode()]
    set_keys = _keys_seen(tmp_path / "b", DATAFLOW_SECRET_KEYS=",".join(given))

    key_file = tmp_path / "a" / "dataflow_secret_key"
    assert first == again == [key_file.read_text().strip()]
    Fernet(first[0])  # a Fernet key
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert set_keys == given
    assert not (tmp_path / "b" / "dataflow_secret_key").exists()


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_a_process_with_a_fresh_var_directory_refuses_the_secrets_saying_which_setting(tmp_path):
    """The database's secrets were sealed with this process's keys; another process is
    given a fresh var directory and no DATAFLOW_SECRET_KEYS (its key file lost): it makes a
    key of its own, which decrypts nothing."""
    DataFlowFactory(name="direct", stream=True, stream_url=f"redis://:{FLOW_URL_PASSWORD}@127.0.0.1:6399/0")
    database = db.settings_dict
    url = f"postgres://{database['USER']}@{database['HOST']}:{database['PORT']}/{database['NAME']}"

    started = _manage(tmp_path / "fresh", "flowctl", "start", "direct", DATABASE_URL=url)

    assert started.returncode == 1
    assert (
        "flow 'direct': source.url cannot be decrypted with any key of DATAFLOW_SECRET_KEYS" in started.stderr
    )
    assert "the var directory's dataflow_secret_key file" in started.stderr
    assert (tmp_path / "fresh" / "dataflow_secret_key").exists()
    run = DataFlow.objects.get(name="direct").runs.get()
    assert run.status == RunStatus.FAILED and "DATAFLOW_SECRET_KEYS" in run.message
    with db.cursor() as cursor:
        cursor.execute(
            "SELECT source_config::text, (SELECT spec::text FROM dataflow_flowrun) FROM dataflow_dataflow"
        )
        stored = " ".join(cursor.fetchone())
    assert FLOW_URL_PASSWORD not in started.stdout + started.stderr + stored + run.message
