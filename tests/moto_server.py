"""A moto server of a test's own: the stand-in for S3 and Kinesis, which cannot run here.

moto in server mode (``python -m moto.server``) is a real HTTP endpoint that speaks the S3 and
Kinesis protocols, so boto3, pyarrow's S3 filesystem and our connectors talk to it as they
would to AWS or MinIO. It keeps everything in memory: stopped and started again, it is empty.
Tests start it on a free loopback port and stop it by its pid.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request

import boto3
from botocore.config import Config

from tests.server_process import ServerProcess

#: The key pair every test client signs with (moto accepts any; these name no real account).
ACCESS_KEY_ID = "testing-key-id"
SECRET_ACCESS_KEY = "testing-secret-key"
REGION = "us-east-1"


class PrivateMotoServer(ServerProcess):
    """``python -m moto.server`` on a free loopback port, in a process of its own."""

    def __init__(self, launcher: str | None = None) -> None:
        """``launcher``: a script to run instead of ``-m moto.server`` (same arguments), such
        as one that corrects a behaviour of moto first."""
        self.launcher = launcher
        super().__init__()
        self.endpoint_url = f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        env = {**os.environ, "MOTO_ALLOW_NONEXISTENT_REGION": "true"}
        self.proc = subprocess.Popen(
            [
                sys.executable,
                *([self.launcher] if self.launcher else ["-m", "moto.server"]),
                "-H",
                "127.0.0.1",
                "-p",
                str(self.port),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{self.endpoint_url}/moto-api/", timeout=1):
                    return
            except OSError:
                if self.proc.poll() is not None:
                    raise AssertionError(f"moto server exited with {self.proc.returncode}") from None
                time.sleep(0.1)
        raise AssertionError(f"moto server did not answer on {self.port}")

    def reset(self) -> None:
        """Forgets every bucket, object and stream (moto's own reset call)."""
        urllib.request.urlopen(
            urllib.request.Request(f"{self.endpoint_url}/moto-api/reset", method="POST"), timeout=10
        ).close()

    def client(self, service: str):  # noqa: ANN201 (boto3's clients have no common type)
        """A boto3 client of ``service`` at this server, with the test key pair."""
        return boto3.client(
            service,
            endpoint_url=self.endpoint_url,
            region_name=REGION,
            aws_access_key_id=ACCESS_KEY_ID,
            aws_secret_access_key=SECRET_ACCESS_KEY,
            config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 2}),
        )

    def __enter__(self) -> PrivateMotoServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill()
