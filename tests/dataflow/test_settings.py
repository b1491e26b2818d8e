"""Safe defaults: DEBUG off unless asked, a secret key made once per var directory (never a
constant), loopback hosts, static files served with DEBUG off, and a production profile under
which ``manage.py check --deploy`` finds nothing. Each case starts fresh processes, as a
deployment does, with the environment it names."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: Prints what a process made of its environment.
SHOW_SETTINGS = (
    "from django.conf import settings; "
    "print(settings.DEBUG, settings.SECRET_KEY, ','.join(settings.ALLOWED_HOSTS), settings.DATAFLOW_PROFILE)"
)


def _environment(var_dir: Path, **changes: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "DATAFLOW_"))}
    env.update(DATAFLOW_VAR_DIR=str(var_dir), **changes)
    return env


def _manage(var_dir: Path, *args: str, **changes: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=_environment(var_dir, **changes),
        capture_output=True,
        text=True,
        timeout=300,
    )


def _settings_seen(var_dir: Path, **changes: str) -> list[str]:
    shown = _manage(var_dir, "shell", "-c", SHOW_SETTINGS, **changes)
    assert shown.returncode == 0, shown.stderr
    return shown.stdout.strip().splitlines()[-1].split(" ")


@pytest.mark.slow
def test_check_deploy_is_clean_under_the_production_profile(tmp_path):
    checked = _manage(tmp_path, "check", "--deploy", "--fail-level", "WARNING", DATAFLOW_PROFILE="production")

    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "System check identified no issues" in checked.stdout


@pytest.mark.slow
def test_check_deploy_names_the_https_settings_outside_the_production_profile(tmp_path):
    checked = _manage(tmp_path, "check", "--deploy", "--fail-level", "WARNING")

    assert checked.returncode != 0
    for warning in ("W004", "W008", "W012", "W016"):
        assert f"security.{warning}" in checked.stderr + checked.stdout
    for fixed in ("W009", "W018"):  # the secret key and DEBUG are safe in every profile
        assert f"security.{fixed}" not in checked.stderr + checked.stdout


@pytest.mark.slow
def test_debug_is_off_and_hosts_are_loopback_unless_set(tmp_path):
    debug, _, hosts, profile = _settings_seen(tmp_path)
    debug_on, *_ = _settings_seen(tmp_path, DJANGO_DEBUG="1")
    _, _, set_hosts, _ = _settings_seen(tmp_path, DJANGO_ALLOWED_HOSTS="flows.example.com, 10.0.0.5")

    assert (debug, hosts, profile) == ("False", "localhost,127.0.0.1,[::1]", "development")
    assert debug_on == "True"
    assert set_hosts == "flows.example.com,10.0.0.5"


@pytest.mark.slow  # over 5 s on 2 cores: not in the fast lane
def test_a_secret_key_is_made_once_per_var_directory_and_kept_private(tmp_path):
    first = _settings_seen(tmp_path / "a")[1]
    again = _settings_seen(tmp_path / "a")[1]
    elsewhere = _settings_seen(tmp_path / "b")[1]
    given = _settings_seen(tmp_path / "a", DJANGO_SECRET_KEY="k" * 60)[1]

    assert first == again == (tmp_path / "a" / "secret_key").read_text().strip()
    assert len(first) >= 50
    assert elsewhere != first
    assert given == "k" * 60
    assert stat.S_IMODE((tmp_path / "a" / "secret_key").stat().st_mode) == 0o600
    assert [p.name for p in (tmp_path / "a").iterdir() if p.name.startswith(".secret_key")] == []


@pytest.mark.slow
def test_processes_starting_together_agree_on_one_secret_key(tmp_path):
    code = (
        "import os; os.environ['DJANGO_SETTINGS_MODULE'] = 'dataflow.settings'; "
        "from django.conf import settings; print(settings.SECRET_KEY)"
    )
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", code],
            cwd=ROOT,
            env=_environment(tmp_path),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(8)
    ]
    keys = set()
    for process in processes:
        out, err = process.communicate(timeout=120)
        assert process.returncode == 0, err
        keys.add(out.strip())

    assert keys == {(tmp_path / "secret_key").read_text().strip()}


def test_the_production_profile_refuses_debug(tmp_path):
    refused = _manage(tmp_path, "check", DATAFLOW_PROFILE="production", DJANGO_DEBUG="1")

    assert refused.returncode != 0
    assert "DJANGO_DEBUG=1 under DATAFLOW_PROFILE=production" in refused.stderr


@pytest.mark.parametrize(
    "path",
    [
        "/static/admin/css/base.css",
        "/static/dataflow/admin/admin.css",
        "/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui.css",
    ],
)
def test_static_files_are_served_with_debug_off(client, settings, path):
    assert settings.DEBUG is False

    response = client.get(path)

    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/css")
