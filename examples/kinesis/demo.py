"""The README's Kinesis flow, whole: starts a moto server (moto[server], in
requirements-dev.txt) on 127.0.0.1:4571 as the stand-in for Kinesis, makes the stream
adf-orders with two shards, puts 100 orders into it, applies and runs
examples/kinesis/orders.toml with ``manage.py runflow`` until its stop rule is met, prints
what the sink holds, and stops the server.

Run from the checkout's root: ``python examples/kinesis/demo.py``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request

import boto3
import pyarrow.parquet as pq

ENDPOINT = "http://127.0.0.1:4571"
STREAM = "adf-orders"


def start_moto() -> subprocess.Popen[bytes]:
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", "4571"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    for _ in range(300):
        try:
            with urllib.request.urlopen(f"{ENDPOINT}/moto-api/", timeout=1):
                return server
        except OSError:
            time.sleep(0.1)
    server.kill()
    raise SystemExit(f"the moto server did not answer on {ENDPOINT}")


def put_orders() -> None:
    kinesis = boto3.client(
        "kinesis",
        endpoint_url=ENDPOINT,
        region_name="us-east-1",
        aws_access_key_id="example-key-id",
        aws_secret_access_key="example-secret-key",
    )
    kinesis.create_stream(StreamName=STREAM, ShardCount=2)
    records = [
        {
            "Data": json.dumps(
                {"id": i, "customer": ["acme", "globex", "hooli"][i % 3], "amount": i / 2}
            ).encode(),
            "PartitionKey": ["acme", "globex", "hooli"][i % 3],
        }
        for i in range(1, 101)
    ]
    kinesis.put_records(StreamName=STREAM, Records=records)
    shards = kinesis.list_shards(StreamName=STREAM)["Shards"]
    print(f"stream {STREAM}: {len(shards)} shards, {len(records)} records put", flush=True)


def run(*command: str) -> None:
    print("running:", " ".join(command), flush=True)
    subprocess.run(command, check=True)


def main() -> None:
    server = start_moto()
    try:
        print(f"moto server (the stand-in for Kinesis) on {ENDPOINT}", flush=True)
        put_orders()
        run("python", "manage.py", "applyflows", "examples/kinesis/orders.toml")
        run("python", "manage.py", "runflow", "kinesis-orders", "--until-done")
        table = pq.read_table("out/kinesis-orders").to_pandas().sort_values("id")
        print(table.to_string(index=False, max_rows=6))
    finally:
        server.terminate()
        server.wait(timeout=20)


if __name__ == "__main__":
    main()
