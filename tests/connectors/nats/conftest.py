"""A real NATS server with JetStream (``NATS_URL``, else 127.0.0.1:4222); each test
gets a stream of its own, deleted after it."""

from __future__ import annotations

import asyncio
import os
import uuid
from pathlib import Path

import nats
import pytest

from source_support.registry import Environment


def nats_url() -> str:
    return os.environ.get("NATS_URL") or "nats://127.0.0.1:4222"


@pytest.fixture()
def env(tmp_path) -> Environment:
    return Environment(allowed_roots=(tmp_path,), base_dir=Path(tmp_path))


@pytest.fixture()
def stream_name() -> str:
    name = f"T{uuid.uuid4().hex[:10].upper()}"
    yield name
    asyncio.run(_delete_stream(nats_url(), name))


async def _delete_stream(url: str, name: str) -> None:
    nc = await nats.connect(url)
    try:
        await nc.jetstream().delete_stream(name)
    except nats.js.errors.NotFoundError:
        pass
    finally:
        await nc.close()
