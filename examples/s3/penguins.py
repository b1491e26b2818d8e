"""Runs examples/s3/penguins.toml against an S3 server of its own: starts moto's S3 server
(``python -m moto.server``, from requirements-dev.txt) on a free loopback port, puts the
penguins of palmerpenguins there as one gzipped CSV object per year, applies the flow
(its endpoint_url set to that port) and runs it on the embedded defaults, prints the
output rows and stops the server.

    python examples/s3/penguins.py
"""

from __future__ import annotations

import gzip
import io
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import boto3
import palmerpenguins
import pandas as pd
from botocore.config import Config

ROOT = Path(__file__).resolve().parents[2]
FLOW = ROOT / "examples" / "s3" / "penguins.toml"
PENGUINS = Path(palmerpenguins.__file__).parent / "data" / "penguins.csv"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_moto(port: int) -> subprocess.Popen[bytes]:
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    for _ in range(300):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/moto-api/", timeout=1).close()
            return server
        except OSError:
            time.sleep(0.1)
    server.kill()
    raise SystemExit("the moto server did not start")


def put_penguins(endpoint: str) -> None:
    s3 = boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="example-key-id",
        aws_secret_access_key="example-secret-key",
        config=Config(s3={"addressing_style": "path"}),
    )
    s3.create_bucket(Bucket="penguins")
    frame = pd.read_csv(PENGUINS, keep_default_na=False)
    for year, rows in frame.groupby("year"):
        text = io.StringIO()
        rows.to_csv(text, index=False)
        key = f"2026/11/year={year}/penguins.csv.gz"
        s3.put_object(Bucket="penguins", Key=key, Body=gzip.compress(text.getvalue().encode()))
        print(f"put s3://penguins/{key}: {len(rows)} penguins", flush=True)


def main() -> None:
    port = free_port()
    server = start_moto(port)
    try:
        endpoint = f"http://127.0.0.1:{port}"
        put_penguins(endpoint)
        flow = ROOT / "var" / "s3-penguins.toml"
        flow.parent.mkdir(exist_ok=True)
        flow.write_text(FLOW.read_text().replace("http://127.0.0.1:9000", endpoint))
        manage = [sys.executable, "manage.py"]
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        subprocess.run([*manage, "applyflows", str(flow)], cwd=ROOT, env=env, check=True)
        subprocess.run(
            [*manage, "runflow", "s3-penguins", "--until-done", "--no-progress"],
            cwd=ROOT,
            env=env,
            check=True,
        )
        for part in sorted((ROOT / "out" / "s3-penguins").glob("*.csv")):
            print(part.read_text(), end="")
    finally:
        server.terminate()
        server.wait(timeout=20)


if __name__ == "__main__":
    main()
