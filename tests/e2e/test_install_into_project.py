"""docs/install-into-your-project.md, as a team that already has a Django project follows it.

The wheel is built from this checkout and installed into a fresh virtualenv
(``--system-site-packages``, so PySpark and the other dependencies come from this
environment, with ``--no-deps``); a new project is made by ``startproject``, and the page's
``file:`` blocks are written into it as they stand. Everything runs from a temporary
directory with no ``PYTHONPATH``, so the checkout is not importable: the app that runs is the
installed one (asserted). The project migrates, runs a flow through its own ``manage.py
runflow``, serves its admin, the dashboard, the API and a static file under its prefix
(``runserver``, a real HTTP server), and ``flowctl`` runs from another directory.

Services: the machine's Redis (REDIS_URL, under a namespace of this test's own); the
project's database is its own SQLite file, as startproject makes it.
"""

from __future__ import annotations

import csv
import http.cookiejar
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from pathlib import Path

import pyarrow.parquet as pq

from tests.server_process import free_port

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "install-into-your-project.md"
PASSWORD = "install-test-pw-1"


def doc_files(text: str) -> dict[str, tuple[str, bool]]:
    """The page's ``<!-- file: PATH -->`` blocks: PATH -> (content, appended or written)."""
    found = re.findall(r"<!-- file: (\S+)( \(append\))? -->\n```\w*\n(.*?)```", text, flags=re.S)
    return {path: (body, bool(append)) for path, append, body in found}


def doc_commands(text: str) -> list[str]:
    """The commands of the page's console blocks (``$ ...`` lines)."""
    return re.findall(r"^\$ (.+)$", text, flags=re.M)


def _run(args: list[str], *, cwd: Path, env: dict[str, str], timeout: float = 300) -> str:
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{args}: {done.stdout[-3000:]}{done.stderr[-3000:]}"
    return done.stdout


def _checkout_copy(dest: Path) -> Path:
    """What the wheel is built from: the packages and the files pyproject.toml names, without
    a build/ directory an earlier build may have left in the checkout."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for package in ("dataflow", "source_support", "connectors"):
        shutil.copytree(ROOT / package, dest / package, ignore=ignore)
    for name in ("pyproject.toml", "README.md", "requirements.txt"):
        shutil.copy(ROOT / name, dest / name)
    return dest


def _orders(data: Path) -> list[tuple[int, float]]:
    rows = [(i, round(i * 1.25, 2)) for i in range(1, 1201)]
    (data / "orders").mkdir(parents=True)
    for name, part in (("a.csv", rows[:700]), ("b.csv", rows[700:])):
        with (data / "orders" / name).open("w", newline="") as file:
            writer = csv.writer(file)
            writer.writerow(["id", "amount"])
            writer.writerows(part)
    return rows


class Browser:
    """urllib with cookies, against the project's runserver; no redirect followed unasked."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.jar = http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.jar))

    def get(self, path: str, headers: dict[str, str] | None = None) -> tuple[int, str, str]:
        """(status, final URL, body), redirects followed."""
        request = urllib.request.Request(self.base + path, headers=headers or {})
        try:
            with self.opener.open(request, timeout=60) as response:
                return response.status, response.url, response.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.url, error.read().decode()

    def post(self, path: str, data: bytes, content_type: str, headers: dict[str, str] | None = None):
        request = urllib.request.Request(
            self.base + path, data=data, headers={"Content-Type": content_type, **(headers or {})}
        )
        with self.opener.open(request, timeout=60) as response:
            return response.status, response.url, response.read().decode()

    def cookie(self, name: str) -> str:
        return next(c.value for c in self.jar if c.name == name and c.value is not None)


def _serve(python: Path, project: Path, env: dict[str, str]) -> tuple[subprocess.Popen, str]:
    port = free_port()
    server = subprocess.Popen(
        [str(python), "manage.py", "runserver", f"127.0.0.1:{port}", "--noreload"],
        cwd=project,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120  # a wait for the server to listen, not a measure
    while time.monotonic() < deadline:
        assert server.poll() is None, "runserver exited"
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return server, f"http://127.0.0.1:{port}"
        except OSError:
            time.sleep(0.2)
    server.kill()
    raise AssertionError("runserver never listened")


def test_the_wheel_installs_into_a_new_project_and_runs_a_flow_under_its_prefix(tmp_path):
    text = DOC.read_text()
    files = doc_files(text)
    commands = doc_commands(text)
    assert set(files) == {
        "mysite/settings.py",
        "mysite/urls.py",
        "mysite/celery.py",
        "mysite/__init__.py",
        "orders.toml",
    }
    # What this test runs is what the page says to run.
    for command in (
        "pip wheel --no-deps -w dist path/to/activedataflow",
        "pip install dist/activedataflow-0.1.0-py3-none-any.whl",
        "django-admin startproject mysite",
        "python manage.py migrate",
        "python manage.py check",
        "python manage.py createsuperuser",
        "python manage.py applyflows orders.toml",
        "python manage.py runflow orders-copy --until-done --no-progress",
        "python manage.py runserver",
        "DJANGO_SETTINGS_MODULE=mysite.settings PYTHONPATH=path/to/mysite flowctl status orders-copy",
    ):
        assert command in commands, command

    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("DATABASE_URL", "DJANGO_SETTINGS_MODULE", "PYTHONPATH") and not k.startswith("DATAFLOW_")
    }
    # The machine's Redis, under a namespace no other test uses (read as the setting's default).
    env["DATAFLOW_REDIS_NAMESPACE"] = f"adf-install-{uuid.uuid4().hex[:8]}"

    # 1. The wheel, and a virtualenv with it.
    source = _checkout_copy(tmp_path / "src")
    _run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", "dist", str(source)], cwd=tmp_path, env=env
    )
    (wheel,) = (tmp_path / "dist").glob("activedataflow-*.whl")
    _run([sys.executable, "-m", "venv", "--system-site-packages", "venv"], cwd=tmp_path, env=env)
    venv = tmp_path / "venv"
    python = venv / "bin" / "python"
    _run([str(python), "-m", "pip", "install", "-q", "--no-deps", str(wheel)], cwd=tmp_path, env=env)

    # 2-4. A new project, with the page's settings, URLs and Celery app.
    _run([str(python), "-m", "django", "startproject", "mysite"], cwd=tmp_path, env=env)
    project = tmp_path / "mysite"
    for path, (body, append) in files.items():
        target = project / path
        target.write_text((target.read_text() + "\n" + body) if append else body)

    def manage(*args: str, env_extra: dict[str, str] | None = None) -> str:
        return _run([str(python), "manage.py", *args], cwd=project, env={**env, **(env_extra or {})})

    where = manage("shell", "-v0", "-c", "import dataflow; print(dataflow.__file__)").strip()
    assert Path(where).is_relative_to(venv), where

    # 5. Migrate, with no error nor warning from any check.
    manage("migrate", "-v0")
    assert manage("check").strip() == "System check identified no issues (0 silenced)."
    manage(
        "createsuperuser",
        "--noinput",
        "--username",
        "admin",
        "--email",
        "admin@example.com",
        env_extra={"DJANGO_SUPERUSER_PASSWORD": PASSWORD},
    )

    # 6. A flow through the project's own runflow; what it wrote is what was read.
    rows = _orders(project / "data")
    assert manage("applyflows", "orders.toml").strip() == "created flow orders-copy"
    out = manage("runflow", "orders-copy", "--until-done", "--no-progress")
    assert "run 1 succeeded: 1200 records read, 0 errors, 1200 rows written" in out
    written = pq.read_table(project / "out" / "orders").to_pylist()
    assert sorted((r["id"], r["amount"]) for r in written) == rows
    assert (project / "var" / "landing").is_dir()  # the app's files under the project's BASE_DIR

    # 7. Served under the project's prefix.
    server, base = _serve(python, project, env)
    try:
        browser = Browser(base)
        status, _, page = browser.get("/admin/login/")
        assert status == 200 and 'name="username"' in page

        _, _, token = browser.post(
            "/flows/api/auth/token/",
            json.dumps({"username": "admin", "password": PASSWORD}).encode(),
            "application/json",
        )
        auth = {"Authorization": f"Token {json.loads(token)['token']}"}
        status, _, body = browser.get("/flows/api/flows/", auth)
        assert status == 200
        (flow,) = json.loads(body)["results"]
        assert flow["name"] == "orders-copy"
        assert flow["url"] == f"{base}/flows/api/flows/orders-copy/"
        status, _, schema = browser.get("/flows/api/schema/")
        assert status == 200 and "/flows/api/flows/{name}/runs/" in schema
        status, _, docs = browser.get("/flows/api/docs/")
        (script,) = re.findall(r'<script src="(/flows/api/docs/\?script=[^"]*)"', docs)
        assert "/flows/api/schema/" in browser.get(script)[2]

        # The dashboard sends an anonymous user to its own login, under the prefix.
        status, url, _ = browser.get("/flows/")
        assert url == f"{base}/flows/login/?next=/flows/"
        status, url, dashboard = browser.post(
            "/flows/login/?next=/flows/",
            urllib.parse.urlencode(
                {
                    "username": "admin",
                    "password": PASSWORD,
                    "csrfmiddlewaretoken": browser.cookie("csrftoken"),
                }
            ).encode(),
            "application/x-www-form-urlencoded",
        )
        assert (status, url) == (200, f"{base}/flows/")
        for link in (
            'href="/flows/flows/orders-copy/"',
            'data-live-url="/flows/live.json"',
            'href="/admin/"',
            'href="/flows/favicon.ico"',
            'href="/static/dataflow/dashboard/dashboard.css"',
        ):
            assert link in dashboard, link
        status, _, flow_page = browser.get("/flows/flows/orders-copy/")
        assert status == 200 and 'href="/admin/dataflow/dataflow/' in flow_page
        status, _, css = browser.get("/static/dataflow/dashboard/dashboard.css")
        assert (
            status == 200
            and css == (Path(where).parent / "static/dataflow/dashboard/dashboard.css").read_text()
        )
        status, _, admin_list = browser.get("/admin/dataflow/dataflow/")
        assert status == 200 and "orders-copy" in admin_list
    finally:
        server.terminate()
        server.wait(timeout=30)

    # 8. flowctl, from a directory that is neither the project's nor the checkout's.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    status_out = _run(
        [str(venv / "bin" / "flowctl"), "status", "orders-copy"],
        cwd=elsewhere,
        env={**env, "DJANGO_SETTINGS_MODULE": "mysite.settings", "PYTHONPATH": str(project)},
    )
    assert "flow: orders-copy\nstatus: succeeded\n" in status_out
