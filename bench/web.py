"""Web benchmark: the API under gunicorn, as the Dockerfile serves it, with 50 clients.

``python bench/web.py [--flows N] [--connections C] [--seconds S]`` needs ``wrk`` (Debian:
``apt-get install wrk``), and DATABASE_URL (PostgreSQL) and REDIS_URL on loopback: it
refuses any other host. It:

1. makes a user with a token and N flows (60 by default) of theirs, each with finished runs
   and the first with an active run of 8 splits, written as rows (no worker runs);
2. gathers the static files and starts gunicorn with the repository's ``gunicorn.conf.py``
   under the production profile on a free loopback port, as if behind a TLS proxy
   (``DATAFLOW_TRUSTED_PROXIES=1``, ``X-Forwarded-Proto: https``);
3. drives ``GET /api/flows/`` and then ``GET /api/flows/<first>/status/`` with wrk, C
   connections (50) for S seconds (20) each, after a 3 s warm-up, and counts every response
   by status class; then, as the raw baseline on the same server, a small static file
   (WhiteNoise answers it before any view: the ceiling of gunicorn, WSGI and the client).

Each endpoint's line gives requests/s, p50 and p99 latency and the non-2xx and 5xx counts;
the machine's load average is printed before and after, since the figures mean little
without it. The last line is ``flows_rps=... flows_p99_ms=... status_rps=...
status_p99_ms=... errors_5xx=N not_2xx=N socket_errors=N flows_ratio=... status_ratio=...``
(the ratios: requests/s against the static file's; socket errors are mostly keep-alive
connections closed when gunicorn replaces a worker after ``max_requests``). Exit status 1
if any response was not a 2xx.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / "bench" / "_work" / "web"
LOOPBACK = {"127.0.0.1", "localhost", "::1"}
USERNAME = "bench-web"
WARMUP_S = 3
#: Counts responses by status class; its done() prints one RESULT line.
WRK_SCRIPT = """
wrk.headers["Authorization"] = "Token " .. os.getenv("BENCH_TOKEN")
wrk.headers["X-Forwarded-Proto"] = "https"
local threads = {}
function setup(thread) table.insert(threads, thread) end
function init(args) ok = 0; c4 = 0; c5 = 0; other = 0 end
function response(status, headers, body)
  if status >= 500 then c5 = c5 + 1
  elseif status >= 400 then c4 = c4 + 1
  elseif status >= 200 and status < 300 then ok = ok + 1
  else other = other + 1 end
end
function done(summary, latency, requests)
  local s = {ok = 0, c4 = 0, c5 = 0, other = 0}
  for _, t in ipairs(threads) do
    for k, _ in pairs(s) do s[k] = s[k] + t:get(k) end
  end
  local e = summary.errors
  io.write(string.format(
    "RESULT requests=%d duration_us=%d p50_us=%d p99_us=%d max_us=%d ok=%d c4=%d c5=%d other=%d socket_errors=%d\\n",
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99), latency.max,
    s.ok, s.c4, s.c5, s.other, e.connect + e.read + e.write + e.timeout))
end
"""


def _require_loopback(name: str) -> str:
    url = os.environ.get(name, "")
    host = urlsplit(url).hostname
    if host not in LOOPBACK:
        sys.exit(
            f"{name} must name a server on loopback (got {url!r}): this benchmark loads what it talks to"
        )
    return url


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _environment(port: int) -> dict[str, str]:
    return {
        **os.environ,
        "DATAFLOW_VAR_DIR": str(WORK / "var"),
        "DJANGO_STATIC_ROOT": str(WORK / "static"),
        "DATAFLOW_PROFILE": "production",
        "DATAFLOW_TRUSTED_PROXIES": "1",
        "DATAFLOW_ALLOWED_ROOTS": str(WORK / "data"),
        "GUNICORN_BIND": f"127.0.0.1:{port}",
        "GUNICORN_ACCESS_LOG": "",  # one line per request would be measured too
        "PYTHONUNBUFFERED": "1",
    }


def _make_rows(flows: int) -> tuple[str, str]:
    """The user's token and the name of the flow with an active run (written as rows)."""
    # Imported here: Django reads the environment this benchmark sets up when imported.
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.utils import timezone
    from rest_framework.authtoken.models import Token

    from dataflow.models import DataFlow, FlowRun, FlowStatus, RunStatus, Split, SplitStatus

    call_command("migrate", verbosity=0)
    user, _ = get_user_model().objects.get_or_create(username=USERNAME)
    DataFlow.objects.filter(owner=user).delete()
    now = timezone.now()
    for i in range(flows):
        flow = DataFlow.objects.create(
            name=f"bench-web-{i:03d}",
            owner=user,
            source_type="files",
            source_config={"path": str(WORK / "data" / f"{i}" / "*.csv")},
            format_type="csv",
            format_options={"schema": "id BIGINT, sensor STRING, temperature DOUBLE"},
            transform_sql="SELECT sensor, avg(temperature) AS t FROM source GROUP BY sensor",
            sink_type="parquet",
            sink_config={"path": str(WORK / "out" / f"{i}")},
            status=FlowStatus.RUNNING if i == 0 else FlowStatus.IDLE,
        )
        for r in range(3):
            FlowRun.objects.create(
                flow=flow,
                status=RunStatus.SUCCEEDED,
                records_read=10_000,
                rows_written=5,
                started_at=now - timedelta(hours=r + 1),
                finished_at=now - timedelta(hours=r + 1) + timedelta(seconds=12),
            )
        if i == 0:
            run = FlowRun.objects.create(flow=flow, status=RunStatus.READING, started_at=now)
            for s in range(8):
                Split.objects.create(
                    run=run,
                    split_id=f"/data/part-{s}.csv@0",
                    payload={"path": f"/data/part-{s}.csv", "start": 0, "end": 1000, "position": 0},
                    position=500,
                    status=SplitStatus.ASSIGNED if s % 2 else SplitStatus.FINISHED,
                    records_read=1_000,
                )
    token, _ = Token.objects.get_or_create(user=user)
    return token.key, "bench-web-000"


def _wait_for(url: str, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2) as answer:
                if answer.status == 200:
                    return
        except OSError:
            if time.monotonic() > deadline:
                raise
        time.sleep(0.3)


def _check_answer(url: str, token: str, expected: str) -> None:
    request = urllib.request.Request(
        url, headers={"Authorization": f"Token {token}", "X-Forwarded-Proto": "https"}
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        body = answer.read().decode()
    if answer.status != 200 or expected not in body:
        sys.exit(f"{url} answered {answer.status} without {expected!r}: {body[:300]}")


def _wrk(url: str, *, token: str, connections: int, seconds: int) -> dict[str, int]:
    script = WORK / "count.lua"
    script.write_text(WRK_SCRIPT)
    command = [
        "wrk",
        f"-t{min(2, connections)}",
        f"-c{connections}",
        f"-d{seconds}s",
        "--timeout",
        "30s",  # gunicorn's own timeout: slower is an error either way
        "-s",
        str(script),
        url,
    ]
    done = subprocess.run(
        command,
        env={**os.environ, "BENCH_TOKEN": token},
        capture_output=True,
        text=True,
        timeout=seconds + 60,
    )
    line = next((x for x in done.stdout.splitlines() if x.startswith("RESULT ")), None)
    if done.returncode != 0 or line is None:
        sys.exit(f"wrk failed ({done.returncode}): {done.stdout}\n{done.stderr}")
    return {key: int(value) for key, value in (pair.split("=") for pair in line.split()[1:])}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--flows", type=int, default=60)
    parser.add_argument("--connections", type=int, default=50)
    parser.add_argument("--seconds", type=int, default=20)
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        sys.exit("wrk is not installed (Debian: apt-get install wrk)")
    _require_loopback("DATABASE_URL")
    _require_loopback("REDIS_URL")
    if not 1 <= args.connections <= 200 or not 1 <= args.seconds <= 120:
        sys.exit("--connections is 1..200 and --seconds 1..120")

    (WORK / "data").mkdir(parents=True, exist_ok=True)
    port = _free_port()
    env = _environment(port)
    os.environ.update(env)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dataflow.settings")
    sys.path.insert(0, str(ROOT))
    token, status_flow = _make_rows(args.flows)
    subprocess.run(
        [sys.executable, "manage.py", "collectstatic", "--noinput", "-v0"], cwd=ROOT, env=env, check=True
    )

    server = subprocess.Popen(
        ["gunicorn", "dataflow.wsgi"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=open(WORK / "gunicorn.log", "w"),  # noqa: SIM115 - the server's whole life
    )
    base = f"http://127.0.0.1:{port}"
    results: dict[str, dict[str, int]] = {}
    try:
        _wait_for(f"{base}/healthz", 60)
        endpoints = {
            "flows": f"{base}/api/flows/",
            "status": f"{base}/api/flows/{status_flow}/status/",
            "static": f"{base}/static/admin/img/icon-yes.svg",
        }
        _check_answer(endpoints["flows"], token, f'"count":{args.flows}')
        _check_answer(endpoints["status"], token, status_flow)
        print(f"gunicorn.conf.py on 127.0.0.1:{port}; load average before: {os.getloadavg()}", flush=True)
        for name, url in endpoints.items():
            _wrk(url, token=token, connections=args.connections, seconds=WARMUP_S)
            result = results[name] = _wrk(
                url, token=token, connections=args.connections, seconds=args.seconds
            )
            rps = result["requests"] / (result["duration_us"] / 1e6)
            print(
                f"{name:6s} GET {url.removeprefix(base)}: {rps:.1f} req/s, p50 {result['p50_us'] / 1000:.1f} ms, "
                f"p99 {result['p99_us'] / 1000:.1f} ms, max {result['max_us'] / 1000:.1f} ms, "
                f"{result['requests']} requests: {result['ok']} 2xx, {result['c4']} 4xx, {result['c5']} 5xx, "
                f"{result['socket_errors']} socket errors",
                flush=True,
            )
        print(f"load average after: {os.getloadavg()}")
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=60)

    def rps(name: str) -> float:
        return results[name]["requests"] / (results[name]["duration_us"] / 1e6)

    errors_5xx = sum(r["c5"] for r in results.values())
    not_2xx = sum(r["c4"] + r["c5"] + r["other"] for r in results.values())
    # Apart: gunicorn replaces a worker after max_requests, closing its keep-alive
    # connections, which wrk counts as read errors; a client opens a new one.
    socket_errors = sum(r["socket_errors"] for r in results.values())
    print(
        f"flows_rps={rps('flows'):.1f} flows_p99_ms={results['flows']['p99_us'] / 1000:.1f} "
        f"status_rps={rps('status'):.1f} status_p99_ms={results['status']['p99_us'] / 1000:.1f} "
        f"errors_5xx={errors_5xx} not_2xx={not_2xx} socket_errors={socket_errors} "
        f"flows_ratio={rps('flows') / rps('static'):.3f} status_ratio={rps('status') / rps('static'):.3f}"
    )
    return 1 if not_2xx else 0


if __name__ == "__main__":
    sys.exit(main())
