"""``runflow`` over a run that cannot start (its source check fails): the run fails at once
saying why, before a Spark session or the in-process worker is started (they used to start
first, and the command waited on them: 25 s for a NATS server that was not there)."""

from __future__ import annotations

import re

import pytest
from django.core.management import CommandError, call_command

from dataflow.management.commands import runflow
from dataflow.models import FlowRun, RunStatus
from dataflow.spark import session
from tests.server_process import free_port

TOML = """
[flow]
name = "{name}"
[source]
{source}
[format]
type = "json"
schema = "id BIGINT"
[transform]
sql = "SELECT id FROM source WHERE id > 0"
[sink]
type = "parquet"
path = "{out}/sink"
"""


@pytest.fixture()
def spark_starts(monkeypatch) -> list[str]:
    """Records each start of a Spark session (the start itself goes on as usual)."""
    started: list[str] = []
    warm_up = session.warm_up

    def recorded():
        started.append("warm_up")
        return warm_up()

    monkeypatch.setattr(session, "warm_up", recorded)
    monkeypatch.setattr(runflow, "warm_up", recorded, raising=False)  # a name runflow imported
    return started


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("source", "reason"),
    [
        (
            'type = "nats_jetstream"\nservers = "nats://127.0.0.1:{port}"\nstream = "S"',
            # refused at once, not a first connect retried until a timeout
            r"cannot reach NATS at nats://127\.0\.0\.1:\d+: .*(refused|Connect call failed)",
        ),
        ('type = "redis_streams"\nurl = "redis://127.0.0.1:{port}/0"\nstreams = "s:*"', "127.0.0.1"),
    ],
    ids=["nats", "redis"],
)
def test_a_run_whose_source_cannot_be_reached_fails_before_spark_starts(
    dirs, tmp_path, monkeypatch, spark_starts, source, reason
):
    monkeypatch.setattr(session, "milestones", {})
    path = tmp_path / "flow.toml"
    path.write_text(TOML.format(name="unreachable", source=source.format(port=free_port()), out=dirs.out))
    call_command("applyflows", str(path))

    with pytest.raises(CommandError, match=reason):
        call_command("runflow", "unreachable", "--until-done", "--no-progress")

    run = FlowRun.objects.get(flow__name="unreachable")
    assert run.status == RunStatus.FAILED and re.search(reason, run.message), run.message
    assert spark_starts == []
    assert "worker" not in session.milestones  # nor was the in-process worker started
